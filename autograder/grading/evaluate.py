"""Evaluate a recorded model in a child process of its own, never in the grader's.

A ``model_accuracy`` case is decided by running the model a submission recorded (plain data,
:mod:`dlcourse.modeldata`) on the reference's inputs, an ``lm_loss`` case by working out the perplexity of the
language model it recorded (:mod:`dlcourse.lmdata`) on the case's tokens (:data:`EVALUATED`, the kinds evaluated
here and nowhere else). Whatever that data makes numpy do, it does in a child
that caps its own memory (:data:`MEMORY_MB`, as a run's kernel is capped: ``memory_rlimit``) and CPU time, and
that the grader kills after :data:`SECONDS` of wall-clock time. A model that needs more gets a failing reason
that names the limit; it never becomes the grader's error, and the grader's memory never holds its arrays.

The child is ``python -m autograder.grading.evaluate``, started afresh (not a fork of the grader, whose threads may
hold locks). Its standard input is one request, plain data only: a line of JSON (the case's name, kind and
parameters, and the sizes of the two arrays that follow), then the recorded value and the reference's value
as ``.npy`` bytes, read without pickle. Its standard output is one line of JSON, at most
:data:`MAX_REPLY_BYTES`: ``{"verdict": null}`` (the case passes), ``{"verdict": "why not"}``, or
``{"limit": "memory"}``.

Each request is evaluated once per grader process (:func:`evaluate_model` keeps the verdict, by the sha256 of
the request and the limits), so that the re-check of a public case's kernel verdict and the trusted check
share one child. The verdicts are kept in memory only: a regrade, in a process of its own, evaluates again.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from autograder.runner.linux import FORK_LOCK, PR_SET_PDEATHSIG
from dlcourse.grading import PLAIN_KINDS, Case, compare

MEMORY_MB = 1024  # what one evaluation may take (RLIMIT_AS, or RLIMIT_DATA beside an NVIDIA GPU)
SECONDS = 60  # wall-clock time of one evaluation, the child's start included (and its CPU time)
MAX_REPLY_BYTES = 8192  # the child's answer (a verdict, escaped as JSON); a longer one is not an answer
MAX_VERDICT_CHARS = 1000  # a verdict's message, as the child sends it
KEPT_VERDICTS = 4096  # verdicts this process keeps, the oldest dropped first
KEPT_PARAMS = 8  # cases whose parameters' JSON this process keeps (a reference's inputs: megabytes each)
EXIT_BROKEN = 3  # the child could not set itself up: the grader's fault, not the model's
EVALUATED = ("model_accuracy", "lm_loss")  # the kinds whose recorded model runs here, never in the grader

_verdicts: OrderedDict[bytes, str | None] = OrderedDict()
_params_json: OrderedDict[int, tuple[dict, bytes]] = OrderedDict()  # id(params) -> (params, their JSON)
_lock = threading.Lock()


def evaluate_model(case: Case, reference: np.ndarray | None, got: np.ndarray) -> str | None:
    """:func:`dlcourse.grading.compare` of a case of a kind in :data:`EVALUATED`, worked out in a limited child: None
    when the recorded model ``got`` passes, else why not. A case whose model must be built as the
    reference's (``architecture="fixed"``) is refused without a ``reference`` to compare it with.
    RuntimeError (the grader's error) only when the child cannot start or set itself up."""
    if case.kind not in EVALUATED:
        raise ValueError(
            f"{case.name}: a case of kind {case.kind!r} is compared in the grader, not in a child"
        )
    refused = missing_reference(case, reference)
    if refused:
        return refused
    if np.asarray(got).dtype.kind not in PLAIN_KINDS:  # (load_cases keeps no other: .npy without pickle)
        return f"{case.name}: the recorded value cannot be compared (not plain data)"
    request = request_bytes(case, reference, got)
    key = hashlib.sha256(b"%d MB, %g s\n" % (MEMORY_MB, SECONDS) + request).digest()
    with _lock:
        if key in _verdicts:
            _verdicts.move_to_end(key)
            return _verdicts[key]
    verdict = run_child(request, case.name)
    with _lock:
        _verdicts[key] = verdict
        while len(_verdicts) > KEPT_VERDICTS:
            _verdicts.popitem(last=False)
    return verdict


def missing_reference(case: Case, reference) -> str | None:
    """Why a case that fixes the architecture cannot be decided without the reference's model (else None):
    the check that the model is built as the test builds it is never skipped."""
    if case.params.get("architecture", "fixed") == "fixed" and reference is None:
        return (
            f"{case.name}: the grader has no reference model to check that this model is built as the test "
            "builds it; not evaluated"
        )
    return None


def request_bytes(case: Case, reference: np.ndarray | None, got: np.ndarray) -> bytes:
    """The child's standard input: a JSON line, then ``got`` and ``reference`` as ``.npy`` bytes."""
    value = _npy(got)
    expected = b"" if reference is None else _npy(reference)
    header = b'{"name": %s, "kind": %s, "value_bytes": %d, "reference_bytes": %s, "params": %s}\n' % (
        json.dumps(case.name).encode(),
        json.dumps(case.kind).encode(),
        len(value),
        b"null" if reference is None else str(len(expected)).encode(),
        _params_bytes(case.params),
    )
    return header + value + expected


def _npy(value) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(value), allow_pickle=False)
    return buffer.getvalue()


def _params_bytes(params: dict) -> bytes:
    """The JSON of a case's parameters, made once per parameters: a reference's inputs can take megabytes,
    and each of its cases is looked up again for every submission."""
    with _lock:
        known = _params_json.get(id(params))
        if known is not None and known[0] is params:
            return known[1]
    text = json.dumps(params).encode()
    with _lock:
        _params_json[id(params)] = (params, text)  # (held, so that its id is not another's)
        while len(_params_json) > KEPT_PARAMS:
            _params_json.popitem(last=False)
    return text


def run_child(request: bytes, name: str) -> str | None:
    """Evaluate ``request`` in a fresh child within the limits; the verdict, or a reason naming the limit."""
    argv = [sys.executable, "-m", "autograder.grading.evaluate", "--memory-mb", str(MEMORY_MB),
            "--seconds", f"{SECONDS:g}", "--parent", str(os.getpid())]  # fmt: skip
    # one BLAS thread: the same products, and so the same verdict, whatever the grader's machine
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with FORK_LOCK:  # (autograder.runner.linux: a fork never overlaps a product in the grader)
        child = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            cwd=Path(__file__).resolve().parents[2], start_new_session=True,
        )  # fmt: skip
    try:
        out, err = child.communicate(request, timeout=SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return _over(name, "time")
    if child.returncode == EXIT_BROKEN:
        raise RuntimeError(f"the model evaluator could not start: {err.decode(errors='replace')[-500:]}")
    if child.returncode == -signal.SIGXCPU:
        return _over(name, "time")
    reply = _reply(out) if child.returncode == 0 else None
    if reply is None:
        if child.returncode == -signal.SIGKILL:  # the kernel's out-of-memory killer
            return _over(name, "memory")
        return (
            f"{name}: the recorded model could not be evaluated within the grader's limits ({MEMORY_MB} MB, "
            f"{SECONDS:g} s): its evaluation stopped (exit status {child.returncode})"
        )
    if "limit" in reply:
        return _over(name, reply["limit"])
    return reply["verdict"]


def _over(name: str, limit: str) -> str:
    needed = f"more than {MEMORY_MB} MB" if limit == "memory" else f"more than {SECONDS:g} s"
    return f"{name}: the recorded model needed {needed} to evaluate"


def _reply(out: bytes) -> dict | None:
    """The child's answer, when it is one: ``{"verdict": None or a message}`` or ``{"limit": ...}``."""
    if len(out) > MAX_REPLY_BYTES:
        return None
    try:
        reply = json.loads(out)
    except ValueError:
        return None
    if not isinstance(reply, dict):
        return None
    if reply.get("limit") in ("memory", "time") and len(reply) == 1:
        return reply
    verdict = reply.get("verdict", 0)
    if len(reply) == 1 and (verdict is None or isinstance(verdict, str)):
        return {"verdict": verdict if verdict is None else verdict[:MAX_VERDICT_CHARS]}
    return None


# ----------------------------------------------------------------------------- the child


def verdict_of(request: bytes) -> dict:
    """The child's answer to ``request`` (:func:`request_bytes`); what the data makes numpy raise is the
    model's failure, said in the verdict."""
    header, _, arrays = request.partition(b"\n")
    head = json.loads(header)
    case = Case(str(head["name"]), str(head.get("kind")), head["params"])
    if case.kind not in EVALUATED:  # (the grader sends no other: a child compares no other kind)
        return {"verdict": f"{case.name}: a case of kind {case.kind[:40]!r} is not evaluated here"}
    size = int(head["value_bytes"])
    got = np.load(io.BytesIO(arrays[:size]), allow_pickle=False)
    reference = None
    if head["reference_bytes"] is not None:
        reference = np.load(
            io.BytesIO(arrays[size : size + int(head["reference_bytes"])]), allow_pickle=False
        )
    try:
        verdict = missing_reference(case, reference) or compare(case, reference, got)
    except MemoryError:
        return {"limit": "memory"}
    except Exception as err:  # noqa: BLE001  (the data is the student's; any failure is theirs)
        verdict = f"{case.name}: the recorded value cannot be compared ({type(err).__name__})"
    return {"verdict": None if verdict is None else verdict[:MAX_VERDICT_CHARS]}


def limit_self(memory_mb: int, seconds: float, parent: int) -> None:
    """The child's limits, set before it reads anything: memory as a run's kernel has it
    (:func:`autograder.runner.linux.memory_rlimit`), CPU time, no core dump, and death with the grader."""
    import ctypes
    import math
    import resource

    from autograder.runner.linux import memory_rlimit

    cap = memory_mb * 2**20
    resource.setrlimit(memory_rlimit(), (cap, cap))
    cpu = math.ceil(seconds)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the grader ended before the death signal was set
        os._exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="evaluate one recorded model (the grader's child)")
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        limit_self(args.memory_mb, args.seconds, args.parent)
        request = sys.stdin.buffer.read()
    except Exception:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        sys.exit(EXIT_BROKEN)
    try:
        reply = verdict_of(request)
    except MemoryError:
        reply = {"limit": "memory"}
    sys.stdout.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
