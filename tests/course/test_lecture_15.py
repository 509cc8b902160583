"""Lecture 15's cells that need an earlier section say which to run first (a RuntimeError, not a NameError),
when a student runs them after the imports only."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

LECTURE = Path(__file__).resolve().parents[2] / "lectures" / "15_attention.ipynb"


def code_cell(marker: str) -> str:
    cells = nbformat.read(str(LECTURE), as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "code" and marker in c.source)


@pytest.mark.parametrize(
    ("marker", "section"),
    [("import keras", "section 4"), ("def prefill", "section 9"), ("torch.compile(block)", "section 9")],
    ids=["keras-needs-the-heads", "kv-cache-needs-the-model", "compile-needs-the-model"],
)
def test_cell_run_too_early_says_what_to_run_first(marker, section):
    namespace: dict = {}
    exec(compile(code_cell("from dlcourse.attention import"), "imports", "exec"), namespace)
    with pytest.raises(RuntimeError, match=rf"Run {section}'s cells first"):
        exec(compile(code_cell(marker), marker, "exec"), namespace)


# Section 8's roofline: what naive and fused attention move, in one number format, with the ridge's spread.

import contextlib  # noqa: E402
import io  # noqa: E402
import re  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dlcourse import roofline  # noqa: E402

IMPORTS, MEMORY, SAVED, COUNTS, ROOFLINE = "9d840468", "8b85bdf4", "302af4a6", "d9f6f5cd", "449cee7e"
CAUSAL_SELF_ATTENTION = "de019d24"


def cell_by_id(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(str(LECTURE), as_version=4).cells if c.get("id") == cell_id)


@pytest.fixture(scope="module")
def roofline_printed() -> dict[str, str]:
    """What section 8's memory, saved-tensor, counting and roofline cells print, run after the imports only."""
    namespace: dict = {}
    printed = {}
    for cell_id in (IMPORTS, MEMORY, SAVED, COUNTS, ROOFLINE):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(cell_by_id(cell_id), cell_id, "exec"), namespace)
        printed[cell_id] = out.getvalue()
    return printed


def test_naive_attention_makes_six_passes_over_the_scores():
    n, d, heads = 512, 16, 2
    q, k, v = (torch.empty(1, heads, n, d, device="meta") for _ in range(3))
    ops = roofline.operator_traffic(lambda: torch.softmax(q @ k.transpose(-2, -1) / d**0.5, dim=-1) @ v)
    assert [op.name for op in ops] == ["bmm", "div", "_softmax", "bmm"]  # the scaling is a pass of its own
    moved = sum(op.read + op.written for op in ops)
    assert moved == roofline.naive_attention_bytes(n, d, 4, heads=heads)
    assert round(moved / (heads * n * n * 4)) == 6


def test_the_lecture_prints_six_passes(roofline_printed):
    passes = float(re.search(r"([\d.]+) passes", roofline_printed[COUNTS]).group(1))
    assert 5.9 < passes < 6.1


@pytest.mark.parametrize("n", [40, 64, 100, 256])
def test_tiled_loop_moves_what_the_fused_formula_says_and_agrees_with_sdpa(n):
    tile, d = 32, 8
    generator = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(2, n, d, dtype=torch.float64, generator=generator) for _ in range(3))
    out, traffic = roofline.tiled_attention(q, k, v, tile)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert sum(op.read + op.written for op in traffic) == roofline.fused_attention_bytes(
        n, d, 8, tile, heads=2
    )
    assert sum(op.flops for op in traffic) == roofline.attention_flops(n, d, heads=2)


def test_fused_intensity_levels_off_near_the_tile_size():
    """K and V are re-read once per query tile: past the tile the intensity stops growing like N / b."""
    tile, d = 8, 8
    intensity = {}
    for n in (8, 32, 128, 256):
        q, k, v = (torch.zeros(1, n, d) for _ in range(3))  # the bytes, not the numbers
        _, traffic = roofline.tiled_attention(q, k, v, tile)
        intensity[n] = sum(op.flops for op in traffic) / sum(op.read + op.written for op in traffic)
    assert intensity[8] == pytest.approx(8 / 4)  # one tile: N / b
    assert all(value < 2 * tile / 4 for value in intensity.values())  # the limit 2 B_r / b
    assert intensity[256] / intensity[128] < 1.05  # doubling N no longer doubles it


def test_the_lecture_prints_a_fused_intensity_that_stops_growing(roofline_printed):
    rows = re.findall(
        r"^\s*(\d+)\s+(\d+)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s+(\d+)\s+\S+$", roofline_printed[COUNTS], re.M
    )
    table = {int(n): (counted, formula, float(intensity)) for n, _, counted, formula, intensity, _ in rows}
    assert len(table) >= 5 and all(counted == formula for counted, formula, _ in table.values())
    tile = int(re.search(r"tiles of (\d+) rows", roofline_printed[COUNTS]).group(1))
    longest, half = max(table), max(table) // 2
    assert longest >= 16 * tile
    assert table[longest][2] < 2 * tile / 4  # float32: at most 2 B_r / b
    assert table[longest][2] / table[half][2] < 1.1  # where N / 4 would have doubled
    assert table[longest][2] < longest / 4 / 8  # N / b would be 8 times more at 16 tiles


def test_each_roof_compares_intensities_of_its_own_number_format(roofline_printed):
    """A float16 peak's ridge is met by intensities of 2-byte numbers, a float32 one by 4-byte numbers: the
    same FLOPs over half the bytes print twice the intensity."""
    blocks = roof_blocks(roofline_printed)
    assert len(blocks) >= 3
    by_format: dict[tuple[int, int], dict[str, float]] = {}
    for roof, (element_bytes, tile, intensities) in blocks.items():
        assert ("float16" in roof) == (element_bytes == 2) and ("float32" in roof) == (element_bytes == 4)
        assert set(intensities) == {"naive", "fused"}
        assert by_format.setdefault((element_bytes, tile), intensities) == intensities
    t4_tile = blocks["a T4, float16 tensor cores, published"][1]
    for name in ("naive", "fused"):
        assert by_format[(2, t4_tile)][name] == pytest.approx(
            2 * by_format[(4, t4_tile)][name], abs=0.15
        )  # printed to 0.1


def roof_blocks(printed: dict[str, str]) -> dict[str, tuple[int, int, dict[str, float]]]:
    """Each roof the roofline cell prints: its bytes per number, the fused kernel's query tile, the intensities."""
    blocks = re.findall(
        r"^(\S.*?) \((\d)-byte numbers, (\d+)-row query tiles, ridge.*\n((?:  .*\n)+)",
        printed[ROOFLINE],
        re.M,
    )
    return {
        roof: (
            int(element_bytes),
            int(tile),
            {name: float(v) for name, v in re.findall(r"(naive|fused):\s+([\d.]+) FLOP/byte", lines)},
        )
        for roof, element_bytes, tile, lines in blocks
    }


def test_a_t4_is_counted_with_the_tiles_its_kernel_uses(roofline_printed):
    """A T4 (sm75) cannot run FlashAttention-2; PyTorch's memory-efficient kernel there takes 64 query rows a tile
    for head sizes up to 64 (fmha_cutlassF_*_64x64_rf_sm75), half FlashAttention-2's 128: half the limit 2 B_r / b.
    The verdicts the text states hold with that tile: above the float32 ridge, below the float16 one."""
    blocks = roof_blocks(roofline_printed)
    n, d = 2048, 16
    assert blocks["this CPU, float32, measured"][1] == 128
    for roof, ridge in (
        ("a T4, float32, published", 8.1e12 / 320e9),
        ("a T4, float16 tensor cores, published", 65e12 / 320e9),
    ):
        element_bytes, tile, intensities = blocks[roof]
        assert tile == 64
        fused = roofline.attention_flops(n, d) / roofline.fused_attention_bytes(n, d, element_bytes, 64)
        assert intensities["fused"] == pytest.approx(fused, abs=0.05)
        assert (fused > ridge) == (element_bytes == 4)
    text = "\n".join(
        c.source for c in nbformat.read(str(LECTURE), as_version=4).cells if c.cell_type == "markdown"
    )
    assert "64-row query tiles" in text and "tiled the same way.)" not in text


def test_operator_traffic_counts_an_out_argument_as_written():
    a, b, c = torch.ones(100), torch.ones(100), torch.empty(100)
    (op,) = roofline.operator_traffic(lambda: torch.add(a, b, out=c))
    assert (op.read, op.written) == (800, 400)
    (op,) = roofline.operator_traffic(lambda: torch.add(a, b))
    assert (op.read, op.written) == (800, 400)


def test_the_text_sizes_tiles_as_dao_et_al_do():
    """Dao et al. 2022, Algorithm 1: B_c = ceil(M / 4d) key rows, B_r = min(ceil(M / 4d), d) query rows."""
    text = "\n".join(
        c.source for c in nbformat.read(str(LECTURE), as_version=4).cells if c.cell_type == "markdown"
    )
    assert r"B_r \approx M/(4d)" not in text
    assert r"B_c = \lceil M/(4d) \rceil" in text and r"B_r = \min(\lceil M/(4d) \rceil, d)" in text


def test_cpu_verdict_follows_the_spread_of_the_ridge(roofline_printed):
    text = roofline_printed[ROOFLINE]
    low, high = map(float, re.search(r"every round between ([\d.]+) and ([\d.]+)", text).groups())
    cpu = re.search(r"^this CPU, float32.*\n((?:  .*\n)+)", text, re.M).group(1)
    found = re.findall(r"([\d.]+) FLOP/byte: ([\w-]+)", cpu)
    assert found, cpu
    for intensity, said in found:
        # the lecture decides on the unrounded numbers and prints them to one decimal: a printed intensity within
        # rounding of a printed bound may have been on either side of it (seen: 10.0 against a low of 10.0, said
        # "memory-bound"); the verdict is monotone in each number, so the corners of the rounding box bound it
        half = 0.05
        possible = {
            roofline.verdict(float(intensity) + di, roofline.Ridge((low + dl, max(low + dl, high + dh))))
            for di in (-half, half)
            for dl in (-half, half)
            for dh in (-half, half)
        }
        assert said in possible, (intensity, low, high, said, possible)


def test_verdict_is_undecided_inside_the_spread():
    ridge = roofline.Ridge((0.9, 12.0, 20.0))
    assert roofline.verdict(25.0, ridge) == "compute-bound"
    assert roofline.verdict(0.5, ridge) == "memory-bound"
    assert roofline.verdict(5.0, ridge) == "undecided"  # above the loaded round's ridge, below the others
    assert roofline.verdict(5.0, 3.0) == "compute-bound"  # a published ridge has no spread


def test_cpu_roofline_rounds_are_many_and_positive():
    flops, bandwidth = roofline.cpu_roofline_rounds(n=256, copy_bytes=2**22, rounds=5, warmup=1)
    assert flops.shape == bandwidth.shape == (5,) and (flops > 0).all() and (bandwidth > 0).all()
    source = cell_by_id(ROOFLINE)
    n, rounds = re.search(r"cpu_roofline_rounds\(n=(\d+).*rounds=(\d+)", source).groups()
    assert int(n) >= 1024 and int(rounds) >= 10  # not the 3-repeat 512 x 512 product whose verdict flipped


def test_sdpa_keeps_the_log_of_the_softmax_denominator(roofline_printed):
    differences = [float(x) for x in re.findall(r"largest difference ([\d.e+-]+)", roofline_printed[SAVED])]
    assert len(differences) == 2 and max(differences) < 1e-5
    text = "\n".join(
        c.source for c in nbformat.read(str(LECTURE), as_version=4).cells if c.cell_type == "markdown"
    )
    assert "softmax's sum)" not in text and "denominator" in text
    assert "six passes" in text and "about four passes" not in text
    assert "grows with $N$. In the backward" not in text  # the old claim that fused intensity grows like N/4


def test_is_causal_is_right_only_from_an_empty_cache():
    """The lecture's CausalSelfAttention (is_causal=N > 1, aligned top-left) matches recomputation when decoding
    one token at a time, and not for a chunk of tokens onto a filled cache (chunked prefill)."""
    namespace: dict = {}
    exec(compile(cell_by_id(IMPORTS), "imports", "exec"), namespace)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(cell_by_id(CAUSAL_SELF_ATTENTION), "attention", "exec"), namespace)
    assert "only from an empty cache" in cell_by_id(CAUSAL_SELF_ATTENTION)
    torch.manual_seed(0)
    layer = namespace["CausalSelfAttention"](16, 2).double()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)
        cache: dict = {}
        layer(x[:, :6], cache)
        one_at_a_time = torch.cat([layer(x[:, t : t + 1], cache) for t in range(6, 9)], dim=1)
        cache = {}
        layer(x[:, :6], cache)
        chunk = layer(x[:, 6:9], cache)
    torch.testing.assert_close(one_at_a_time, full[:, 6:])
    assert (chunk - full[:, 6:]).abs().max() > 1e-3
