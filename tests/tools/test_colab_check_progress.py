"""``make colab-check`` says what it is doing at least every ``HEARTBEAT_S`` seconds: pip's own lines while it
downloads and installs Colab's pins (and a line with the elapsed seconds while pip is silent), then a line per
notebook with its count; the kernels' known start-up noise is left out of that log and nothing else is. Driven
here with fake steps: no network, no second environment."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import nbformat
import pytest

from benchmarks import colab_check

TCP = (
    "[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication (including code "
    "and outputs) is sent in plain text and is susceptible to eavesdropping."
)


@pytest.mark.tooling  # (make colab-check's steps, run for real: make test-tools)
def test_a_step_streams_its_lines_beats_while_silent_and_drops_only_the_kernel_noise():
    events: list[str] = []
    code = textwrap.dedent(f"""
        import time
        print("Collecting torch==2.11.0", flush=True)
        time.sleep(1.5)
        print({TCP!r})
        print("[IPKernelApp] WARNING | some other warning")
        print("a line that quotes: Kernel is running over TCP without encryption.")
    """)
    colab_check.stream([sys.executable, "-c", code], "downloading", lambda t: events.append(f"log {t}"),
                       show=lambda line: events.append(f"show {line}"), every=0.1)  # fmt: skip
    shown = [e for e in events if e.startswith("show ")]
    assert shown == [
        "show Collecting torch==2.11.0",
        "show [IPKernelApp] WARNING | some other warning",
        "show a line that quotes: Kernel is running over TCP without encryption.",
    ]
    beats = [i for i, e in enumerate(events) if e.startswith("log downloading: ") and e.endswith(" s so far")]
    assert len(beats) >= 3, events  # 1.5 s of silence at 0.1 s (a loaded machine may wake the beat late)
    assert events.index(shown[0]) < beats[0] and beats[-1] < events.index(shown[1])
    with pytest.raises(subprocess.CalledProcessError):
        colab_check.stream([sys.executable, "-c", "raise SystemExit(3)"], "x", print, every=0.1)


@pytest.mark.tooling  # (make colab-check's steps, run for real: make test-tools)
def test_the_download_and_the_install_show_pips_lines_and_the_elapsed_time(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent("""
        import pathlib, shutil, sys, time
        args = sys.argv[1:]
        if args[0] == "-c":
            print("3.13.0")
        elif args[:2] == ["-m", "venv"]:
            (pathlib.Path(args[2]) / "bin").mkdir(parents=True)
            shutil.copy(__file__, pathlib.Path(args[2]) / "bin" / "python")
        else:
            assert "--quiet" not in args, args
            print(f"pip {args[2]}: first line", flush=True)
            time.sleep(1.2)  # (at 0.1 s, about 12 beats: a loaded machine may wake them late)
            print(f"pip {args[2]}: last line", flush=True)
    """)
    )
    fake.chmod(0o755)
    monkeypatch.setattr(colab_check, "HEARTBEAT_S", 0.1)
    venv, cost = colab_check.build_env(str(fake), tmp_path / "cache", lambda t: print(f"LOG {t}"))
    out = capsys.readouterr().out.splitlines()
    assert not cost["reused"] and (venv / ".colab-pins").is_file()
    for step, pip in (("downloading", "download"), ("installing", "install")):
        first, last = out.index(f"  pip {pip}: first line"), out.index(f"  pip {pip}: last line")
        beats = [line for line in out[first:last] if line.startswith(f"LOG {step}: ")]
        assert len(beats) >= 2, out


@pytest.mark.tooling  # (make colab-check's steps, run for real: make test-tools)
def test_each_notebook_has_its_count_and_no_kernel_noise(tmp_path, capfd):
    paths = []
    for name in ("a", "b"):
        nb = nbformat.v4.new_notebook()
        # debugpy's file-check switch reaches the kernel (Colab's ipykernel 6 prints 4 lines without it)
        nb.cells = [
            nbformat.v4.new_code_cell("import os\nassert os.environ['PYDEVD_DISABLE_FILE_VALIDATION'] == '1'")
        ]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        paths.append(tmp_path / f"{name}.ipynb")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    found = colab_check.run_in(sys.executable, "reference", paths, {}, scratch, print)
    assert [found[str(p)]["ran"] for p in paths] == [True, True]
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert any("[1/2] reference: " in line and line.endswith("a.ipynb") for line in lines), out
    assert any("[2/2] reference: " in line and line.endswith("b.ipynb") for line in lines), out
    assert "TCP without encryption" not in out + err
