"""A7's lecture-paste sample: lecture 15's code pasted into A7's answer cells, as a student who copies the lecture
would hand it in (single-head thinking, no masks, naive attention that also returns the log-sum-exp, a cache grown
with ``torch.cat``, SDPA's top-left causal mask, the lecture's cache formula; nothing where the lecture has nothing:
the backward pass by hand and the benchmark of SDPA's backends).
It must stay well below a pass: the assignment asks for the lecture's ideas applied, not pasted.

The sample is made from the release, so it follows the assignment; after ``python -m autograder check A7 --update``
rewrite it with ``.venv/bin/python -m tests.assignments.test_a7_lecture_paste``.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import Course, is_solution, nbgrader_meta
from tests.fixtures.lecture_paste import MAIN, SAMPLE, grade_pasted, pasted_notebook, write_samples

AID = "A7"

# answer cell -> lecture 15's code for it, adapted only to the signature; cells not named keep the release's stub
PASTED = {
    "attention": """
def attention(q, k, v, mask=None, is_causal=False, scale=None):
    # lecture 15, sections 1 and 3: E = Q K^T / sqrt(D_Q), the causal mask, the softmax over the keys
    E = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if is_causal:
        E = E.masked_fill(torch.ones(E.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(E, dim=-1) @ v
""",
    "multi_head_attention": """
def multi_head_attention(query, key, value, params, n_heads, key_padding_mask=None, attn_mask=None):
    # lecture 15, exercise 2: unmasked self-attention of one sequence, the heads split with reshapes
    def one_sequence(x):
        n, d = x.shape
        q, k, v = torch.split(x @ params["in_proj_weight"].T + params["in_proj_bias"], d, dim=1)
        q, k, v = (t.reshape(n, n_heads, d // n_heads).transpose(0, 1) for t in (q, k, v))
        weights = torch.softmax(q @ k.transpose(1, 2) / (d // n_heads) ** 0.5, dim=-1)
        y = (weights @ v).transpose(0, 1).reshape(n, d)
        return y @ params["out_proj.weight"].T + params["out_proj.bias"]

    return torch.stack([one_sequence(x) for x in query])
""",
    "positions": """
import numpy as np


def sinusoidal_encoding(positions, d_model, base=10000.0):
    # lecture 15, section 2
    position = np.arange(len(positions))[:, None]
    frequency = 1.0 / base ** (np.arange(0, d_model, 2) / d_model)
    encoding = np.zeros((len(positions), d_model))
    encoding[:, 0::2] = np.sin(position * frequency)
    encoding[:, 1::2] = np.cos(position * frequency)
    return torch.from_numpy(encoding).float()


def equivariance_gap(layer, x, permutation, encoding=None):
    # lecture 15, section 2: f(s(X) + PE) against s(f(X + PE))
    encoding = 0 if encoding is None else encoding
    with torch.no_grad():
        return float((layer(x[:, permutation] + encoding) - layer(x + encoding)[:, permutation]).abs().max())
""",
    "tiled_attention": """
def tiled_attention(q, k, v, block_q=16, block_k=16, is_causal=False, scale=None):
    # lecture 15, section 8: naive attention, and the log of the softmax's sum that the fused kernel keeps
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    E = q @ k.transpose(-2, -1) * scale
    if is_causal:
        E = E.masked_fill(torch.ones(E.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(E, dim=-1) @ v, torch.logsumexp(E, dim=-1)
""",
    "kv_cache": '''
class KVCache:
    """The keys and values of one block, preallocated: k and v of shape (batch, n_kv_heads, max_len, head_dim)."""

    def __init__(self, batch, n_kv_heads, max_len, head_dim, dtype=torch.float32):
        # lecture 15, section 10: the cache grows with torch.cat
        self.k = self.v = None
        self.length = 0

    def append(self, k_new, v_new):
        if self.k is not None:
            k_new, v_new = torch.cat([self.k, k_new], dim=2), torch.cat([self.v, v_new], dim=2)
        self.k, self.v = k_new, v_new
        self.length = k_new.shape[2]
        return self.k, self.v


def kv_cache_bytes(config):
    # lecture 15, section 10: 2 x L x N x D x 4 bytes
    return 2 * config["n_layers"] * config["max_len"] * config["d_model"] * 4
''',
    "decoder_block": '''
class DecoderBlock(nn.Module):
    """A causal pre-norm Transformer block with grouped-query attention and an optional KV cache."""

    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        assert d_model % n_heads == 0 and n_heads % n_kv_heads == 0
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * n_kv_heads * self.head_dim)  # keys, then values
        self.out_proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, cache=None):
        # lecture 15, sections 5 and 10: CausalSelfAttention and Block
        B, N, D = x.shape
        h = self.norm1(x)
        q = self.q_proj(h).reshape(B, N, self.n_heads, -1).transpose(1, 2)
        k, v = (t.reshape(B, N, self.n_heads, -1).transpose(1, 2) for t in self.kv_proj(h).split(D, dim=-1))
        if cache is not None:
            k, v = cache.append(k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=N > 1)
        x = x + self.out_proj(y.transpose(1, 2).reshape(B, N, D))
        return x + self.mlp(self.norm2(x))
''',
}


def lecture_paste(course: Course = MAIN) -> str:
    """The release with lecture 15's code in the answer cells it has code for: the sample's file text."""
    return pasted_notebook(AID, PASTED, course)


def test_every_pasted_cell_is_an_answer_cell_of_the_release():
    release = nbformat.read(str(MAIN.release_notebook(AID)), as_version=4)
    answers = {
        nbgrader_meta(c)["grade_id"] for c in release.cells if is_solution(c) and c.cell_type == "code"
    }
    assert set(PASTED) <= answers
    # the lecture has no custom backward pass, and times SDPA as a whole, never one backend at a time
    assert answers - set(PASTED) == {"flash_attention", "sdpa_benchmark"}


def test_committed_lecture_paste_is_current():
    path = MAIN.samples(AID) / f"{SAMPLE}.ipynb"
    assert path.read_text(encoding="utf-8") == lecture_paste(), (
        "run `.venv/bin/python -m tests.assignments.test_a7_lecture_paste`"
    )


@pytest.mark.slow
def test_lecture_paste_earns_well_below_a_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = grade_pasted(AID, lecture_paste(), tmp_path)
    assert result.status != "error", result.reason
    assert 0 < result.score < 40, (result.score, result.reason)


if __name__ == "__main__":
    write_samples({AID: lecture_paste()})
