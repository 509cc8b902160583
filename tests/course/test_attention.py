"""dlcourse.attention measures what it says: FLOPs per module, the SDPA kernel that ran, per-call times,
bytes of storages, and a text that is the same whatever the program imported before."""

from __future__ import annotations

import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from dlcourse.attention import (
    attention_kernels,
    flop_counts,
    per_token_times,
    python_docs_text,
    tensor_bytes,
)


def test_flop_counts_per_module_on_the_meta_device():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("meta")
    x = torch.empty(5, 8, device="meta")
    counts = flop_counts(lambda: model(x))
    assert counts["Sequential.0"] == 2 * 5 * 8 * 16
    assert counts["Sequential.2"] == 2 * 5 * 16 * 4
    assert counts["Global"] == counts["Sequential"] == counts["Sequential.0"] + counts["Sequential.2"]


def test_flop_counts_of_attention_on_meta_are_the_two_products():
    q = torch.empty(2, 3, 10, 4, device="meta")
    counts = flop_counts(lambda: F.scaled_dot_product_attention(q, q, q))
    assert counts["Global"] == 2 * (2 * 2 * 3 * 10 * 10 * 4)  # Q K^T and A V


def test_attention_kernels_names_the_fused_cpu_kernel_and_nothing_for_plain_matmuls():
    q = torch.randn(1, 2, 64, 8)
    names = attention_kernels(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))
    assert "aten::scaled_dot_product_attention" in names
    assert any(name.startswith("aten::_scaled_dot_product") for name in names), names
    assert attention_kernels(lambda: torch.softmax(q @ q.transpose(-2, -1), -1) @ q) == []


def test_per_token_times_times_each_call():
    calls = []
    # the third call sleeps 0.3 s: long beside what a loaded machine adds to an empty call (2 ms was not)
    times = per_token_times(lambda i: (calls.append(i), time.sleep(0.3 * (i == 2))), 4)
    assert calls == [0, 1, 2, 3] and len(times) == 4
    assert times[2] >= 0.3 and times[2] == max(times)


def test_tensor_bytes_counts_each_storage_once():
    a = torch.zeros(10, 4)  # 160 bytes
    b = torch.zeros(3, dtype=torch.float64)  # 24 bytes
    assert tensor_bytes([{"k": a, "v": a[2:5]}, (b, a.T)]) == 160 + 24
    assert tensor_bytes({"nothing": 1}) == 0


def test_python_docs_text_is_ascii_and_independent_of_what_was_imported(tmp_path):
    text = python_docs_text(max_chars=50_000)
    assert len(text) == 50_000 and all(ch == "\n" or 32 <= ord(ch) < 127 for ch in text)
    script = (
        "import os, sys\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        "from dlcourse.attention import python_docs_text\n"
        "before = python_docs_text()\n"
        "import tensorflow, torch, numpy\n"  # TensorFlow registers classes with collections.abc
        "print(before == python_docs_text(), len(before))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[0] == "True", done.stdout + done.stderr[-2000:]
    assert int(done.stdout.split()[1]) > 100_000
