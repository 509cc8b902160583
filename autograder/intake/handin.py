"""A hand-in's files: which students handed in, what of a hand-in besides its notebooks goes to the run
(as nbgrader's autograde gives it, bounded and read without following links), what a result is tied to
(the submission's digest), and which frameworks a run of the assignment imports before it starts."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
from pathlib import Path

import nbformat

from autograder.course import Course
from autograder.files import sha256_regular


def frameworks_used(course: Course, aid: str) -> tuple[str, ...]:
    """Modules a child imports before the student's code arrives: the heavy ones the source uses.

    The set-up cell's ``dlcourse.banner()`` imports torch, and ``dlcourse.data`` imports scikit-learn (and
    its ``datasets``, 0.1 s, on the first load). Torch's own code imports ``torch._dynamo`` on first use
    in many places: an optimizer's constructor, ``nn.MultiheadAttention``, ``scaled_dot_product_attention``,
    ``torch.autograd.gradcheck``, profiling. That is 0.8 to 1.2 s of every kernel of a source that uses
    torch itself (A3's cells took 1.2 s, 1 s of it that import), so such a source's parent imports it once.
    Plotting (``matplotlib`` or ``dlcourse.plots``) gets matplotlib's figure, Agg canvas and pyplot (0.4 s,
    the font list included; the kernels' ``MPLBACKEND`` is the parent's, Agg, so importing pyplot resolves
    nothing of a kernel's own and makes no figure). Every module of the course's package that the code names
    (``dlcourse.grading``, ``dlcourse.data``, ...) is imported too: 0.03 s of each kernel, and scikit-learn's
    ``model_selection`` with ``dlcourse.data`` (the digits' split): 0.03 s. A source that compiles or exports
    also gets torch's compiler stack (3 s of imports a kernel otherwise pays on its first
    ``torch.compile``). None of these starts a thread when imported. Only code counts: a model answer
    that names ``torch.compile`` costs no kernel the compiler's start (8 s of it in the warm parent,
    :func:`autograder.runner.forkserver.pick_vector_isa`).
    """
    text = "\n".join(
        cell.source
        for nb in course.notebooks(aid)
        for cell in nbformat.read(str(course.source_notebook(aid, nb)), as_version=4).cells
        if cell.cell_type == "code"
    )
    compiles = any(word in text for word in ("torch.compile", "torch._dynamo", "torch.export"))
    data = "sklearn" in text or "dlcourse.data" in text
    plots = "matplotlib" in text or "dlcourse.plots" in text
    course_modules = sorted(set(re.findall(r"\bdlcourse\.([A-Za-z_]\w*)", text)))
    uses = {
        "numpy": "numpy" in text,
        "dlcourse": "dlcourse" in text,
        "torch": "torch" in text or "dlcourse.banner()" in text,
        "sklearn": data,
        "sklearn.datasets": data,
        "sklearn.model_selection": data,
        "matplotlib.figure": plots,
        "matplotlib.backends.backend_agg": plots,
        "matplotlib.pyplot": plots,
        "tensorflow": "tensorflow" in text,
        "torch._dynamo": "torch" in text,  # (so also where it compiles, exports or profiles)
        "torch._inductor.compile_fx": compiles,
        "torch.export": compiles,
        "sympy.tensor.tensor": compiles,  # sympy's sums import it on first use: 0.1 s of an export's shapes
        **{f"dlcourse.{name}": True for name in course_modules},  # (a name that is no module is not findable)
    }
    return tuple(module for module, used in uses.items() if used and _findable(module))


def _findable(module: str) -> bool:
    """Whether ``module`` is installed, without importing it (``find_spec`` of a submodule imports its
    package: 1.4 s of torch in the grader for ``torch._dynamo``)."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not rest:
        return spec is not None
    for folder in spec.submodule_search_locations or ():
        path = Path(folder, *rest.split("."))
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
    return False


def submissions(course: Course, aid: str, students: list[str] | None = None) -> dict[str, Path]:
    """Student id -> hand-in folder."""
    found = course.handed_in(aid)
    if students:
        missing = [s for s in students if s not in found]
        if missing:
            raise KeyError(f"no submission of {aid} from {', '.join(missing)}")
        found = {s: found[s] for s in students}
    return found


# What of a hand-in besides its notebooks goes to the run (data, helpers the student changed), at most:
MAX_FILES, MAX_FILES_BYTES, MAX_DEPTH = 1000, 64 * 2**20, 16
NBGRADER_IGNORE = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]  # nbgrader's default


def _ignored(course: Course) -> list[str]:
    configured = course.config.CourseDirectory.get("ignore")
    return [*(configured if isinstance(configured, list) else NBGRADER_IGNORE), "samples"]


def _copy_regular(path: Path, target: Path, limit: int) -> int | None:
    """Copy the regular file ``path`` (never through a link, never blocking on a FIFO) to ``target``; its
    size, or None when it is not a regular file or is larger than ``limit``."""
    import errno
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO, errno.EACCES, errno.ENOENT, errno.EISDIR):
            return None
        raise
    with os.fdopen(fd, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        data = src.read(limit + 1)
        if len(data) > limit:
            return None
        target.write_bytes(data)
        return len(data)


def assignment_files(course: Course, aid: str, handed_in: Path | None, target: Path) -> list[str]:
    """Fill the grader's folder ``target`` with the files a run of ``aid`` gets beside its notebook, as
    nbgrader's autograde gives them: what the student handed in besides the assignment's notebooks (regular
    files only, at most :data:`MAX_FILES` and :data:`MAX_FILES_BYTES`), then the source's own files (data,
    images, helper modules; not notebooks, nor what ``CourseDirectory.ignore`` names) over them, except
    those the course lets students change (``Autograde.exclude_overwriting``). Returns notes for the
    student about what was left out."""
    import fnmatch
    import os

    ignore = _ignored(course)
    notebooks = {f"{nb}.ipynb" for nb in course.notebooks(aid)}
    kept = course.config.Autograde.get("exclude_overwriting", {})
    kept = set(kept.get(aid, [])) if isinstance(kept, dict) else set()
    notes: list[str] = []

    def skipped(rel: Path) -> bool:
        return any(fnmatch.fnmatch(part, pattern) for part in rel.parts for pattern in ignore)

    if handed_in is not None and handed_in.is_dir():
        count = total = 0
        for folder, dirs, files in os.walk(handed_in, followlinks=False):
            depth = len(Path(folder).relative_to(handed_in).parts)
            if depth >= MAX_DEPTH and dirs:
                notes.append(f"folders nested deeper than {MAX_DEPTH} levels were not given to the run")
            dirs[:] = (
                sorted(d for d in dirs if not (Path(folder) / d).is_symlink()) if depth < MAX_DEPTH else []
            )
            for name in sorted(files):
                path = Path(folder) / name
                rel = path.relative_to(handed_in)
                if (len(rel.parts) == 1 and name in notebooks) or name == "timestamp.txt" or skipped(rel):
                    continue
                if count >= MAX_FILES or total >= MAX_FILES_BYTES:
                    notes.append(f"more than {MAX_FILES} files or {MAX_FILES_BYTES // 2**20} MB handed in besides "
                                 "the notebooks: the rest was not given to the run")  # fmt: skip
                    return notes
                size = _copy_regular(path, target / rel, MAX_FILES_BYTES - total)
                if size is None:
                    notes.append(f"{rel}: not a regular file, or too large; not given to the run")
                    continue
                count, total = count + 1, total + size
    source = course.source / aid
    for folder, dirs, files in os.walk(source, followlinks=False):
        dirs[:] = [d for d in dirs if not skipped((Path(folder) / d).relative_to(source))]
        for name in files:
            rel = (Path(folder) / name).relative_to(source)
            if name.endswith(".ipynb") or skipped(rel) or (str(rel) in kept and (target / rel).exists()):
                continue
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).unlink(missing_ok=True)
            shutil.copyfile(Path(folder) / name, target / rel)
    return notes


def submission_digest(folder: Path, notebooks: list[str]) -> str:
    """What a result is tied to: the sha256 of the notebook for a hand-in of one notebook and nothing else
    (this course's), else of every notebook's and other file's name and sha256. Read without following links
    or blocking; what cannot be read counts as its name alone."""
    import os

    entries = []
    if folder.is_dir():
        for root, dirs, files in os.walk(folder, followlinks=False):
            dirs[:] = sorted(dirs) if len(Path(root).relative_to(folder).parts) < MAX_DEPTH else []
            if len(entries) > MAX_FILES:
                break
            for name in sorted(files):
                path = Path(root) / name
                if name == "timestamp.txt" and path.parent == folder:
                    continue
                entries.append((str(path.relative_to(folder)), path))
    if len(notebooks) == 1 and [rel for rel, _ in entries] == [f"{notebooks[0]}.ipynb"]:
        return sha256_regular(entries[0][1])
    digest = hashlib.sha256()
    for rel, path in entries[:MAX_FILES]:
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(sha256_regular(path).encode())
    return digest.hexdigest()
