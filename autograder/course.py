"""Where things live: the course directory, its assignments, and the grader's workspace."""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
GRADING = ".grading"  # the grader's own folder in a course (git-ignored; never visible to students)
SEED_FILE = "heldout-seed"  # in the grader's workspace: the course's secret seed (Course.seed_file)
GRADEBOOK = "gradebook.db"  # nbgrader's SQLite gradebook in a course's root, unless the course names another
SQLITE = "sqlite:///"


def sqlite_url(path: Path) -> str:
    """The gradebook URL of the SQLite file at ``path``."""
    return SQLITE + str(path)


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite gradebook URL; None for another database."""
    return Path(url.removeprefix(SQLITE)) if url.startswith(SQLITE) else None


@dataclass(frozen=True)
class Course:
    """A course directory laid out as nbgrader expects, with the release directory ``assignments``."""

    root: Path = ROOT
    workspace: Path | None = None
    db: str | None = (
        None  # a gradebook URL; default: $DLCOURSE_DB_URL for this course, else SQLite in the root
    )
    cache_root: Path | None = None  # references and canaries; a throwaway copy shares its origin's

    def _folder(self, name: str, default: str) -> Path:
        """A folder of the layout, as the course's ``CourseDirectory.<name>`` names it."""
        configured = self.config.CourseDirectory.get(name)
        return self.root / (configured if isinstance(configured, str) and configured else default)

    @property
    def source(self) -> Path:
        return self._folder("source_directory", "source")

    @property
    def release(self) -> Path:
        """Releases: ``assignments/`` in this course, nbgrader's ``release/`` by default."""
        return self._folder("release_directory", "release")

    @property
    def work(self) -> Path:
        """The grader's own files (references, runs, results); git-ignored, never visible to students."""
        return self.workspace or self.root / GRADING

    def seed_file(self) -> Path:
        """The course's secret seed (held-out data, measured cells' inputs: :mod:`autograder.grading.heldout`), in
        the grader's workspace: made at random the first time, then kept. A copy of the course takes the same one."""
        path = self.work / SEED_FILE
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(path, "x") as fh:  # (two graders at once: the first one's stays)
                    fh.write(secrets.token_hex(8) + "\n")
            except FileExistsError:
                pass
        return path

    @property
    def cache(self) -> Path:
        """What the grader computed from the sources and may reuse: references and canary results, each
        keyed by the source, the grading code and the machine's software and device."""
        return self.cache_root or self.root / GRADING / "cache"

    @property
    def reference_dir(self) -> Path:
        return self.cache / "reference"

    # ----------------------------------------------------------------- one home for each path of the layout
    #
    # An assignment is a folder ``source/<aid>/`` of any number of notebooks with any names, plus the files
    # they read (data, images, helper modules), as nbgrader has it. This course's own assignments are one
    # notebook each, named as the assignment: where a notebook is not named, that one is meant (or the
    # assignment's only notebook).

    def notebooks(self, aid: str) -> list[str]:
        """The names (without ``.ipynb``) of the assignment's notebooks, as nbgrader finds them: the
        notebooks at the top of ``source/<aid>/``."""
        folder = self.source / aid
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.ipynb") if p.is_file() and not p.name.startswith("."))

    def notebook(self, aid: str, nb: str | None = None) -> str:
        """``nb``, or the notebook meant when none is named: the one named as the assignment, else its only
        notebook; an assignment of several notebooks needs the name."""
        if nb is not None:
            return nb
        names = self.notebooks(aid)
        if aid in names or not names:
            return aid
        if len(names) == 1:
            return names[0]
        raise ValueError(f"{aid} has {len(names)} notebooks ({', '.join(names)}): name the one meant")

    def submission_folder(self, aid: str, sid: str) -> Path:
        """Where nbgrader (and ``collect``) keep a student's hand-in: its notebooks and other files."""
        return self._folder("submitted_directory", "submitted") / sid / aid

    def submission(self, aid: str, sid: str, nb: str | None = None) -> Path:
        """One notebook of a student's hand-in."""
        return self.submission_folder(aid, sid) / f"{self.notebook(aid, nb)}.ipynb"

    def submitted(self, aid: str, nb: str | None = None) -> dict[str, Path]:
        """Student id -> the hand-in's notebook ``nb``, for every student who has handed it in."""
        base, name = self._folder("submitted_directory", "submitted"), self.notebook(aid, nb)
        paths = sorted(base.glob(f"*/{aid}/{name}.ipynb")) if base.is_dir() else []
        return {path.parent.parent.name: path for path in paths}

    def handed_in(self, aid: str) -> dict[str, Path]:
        """Student id -> hand-in folder, for every student who has handed in any notebook of ``aid``."""
        base, names = self._folder("submitted_directory", "submitted"), set(self.notebooks(aid)) or {aid}
        folders = sorted(base.glob(f"*/{aid}")) if base.is_dir() else []
        return {
            f.parent.name: f
            for f in folders
            if f.is_dir()
            and any((f / f"{name}.ipynb").exists() or (f / f"{name}.ipynb").is_symlink() for name in names)
        }

    def executed(self, aid: str, sid: str, nb: str | None = None) -> Path:
        """The notebook as the grader ran it, where formgrader looks for it."""
        return (
            self._folder("autograded_directory", "autograded") / sid / aid / f"{self.notebook(aid, nb)}.ipynb"
        )

    def results_dir(self, aid: str) -> Path:
        return self.work / "results" / aid

    def result(self, aid: str, sid: str) -> Path:
        """The grader's record of one submission (JSON), written last: it marks the submission done."""
        return self.results_dir(aid) / f"{sid}.json"

    def kept_run(self, aid: str, sid: str, nb: str | None = None) -> Path:
        """What a notebook's run captured (its cases' values, the kernel's summary), kept so that a
        regrade can decide the points again without running the student's code."""
        return self.work / "runs" / aid / sid / self.notebook(aid, nb)

    def feedback_page(self, aid: str, sid: str, nb: str | None = None) -> Path:
        return self._folder("feedback_directory", "feedback") / sid / aid / f"{self.notebook(aid, nb)}.html"

    def samples(self, aid: str) -> Path:
        """The assignment's sample submissions (perfect, partial, ...), kept beside its source; nbgrader
        leaves them out of releases (``CourseDirectory.ignore``)."""
        return self.source / aid / "samples"

    def private_folders(self) -> tuple[str, ...]:
        """What no student's kernel may see: the course (sources, submissions, gradebook), the grader's
        workspace and its cache."""
        return tuple(str(p) for p in dict.fromkeys((self.root, self.work, self.cache)))

    @property
    def db_url(self) -> str:
        """The gradebook: given, else ``$DLCOURSE_DB_URL``, else the course's ``CourseDirectory.db_url``,
        else SQLite in the root."""
        if self.db:
            return self.db
        if os.environ.get("DLCOURSE_DB_URL"):
            return os.environ["DLCOURSE_DB_URL"]
        configured = self.config.CourseDirectory.get("db_url")
        return configured if isinstance(configured, str) and configured else sqlite_url(self.root / GRADEBOOK)

    @property
    def config(self):
        """The course's ``nbgrader_config.py`` as nbgrader loads it (read once per course object)."""
        return _load_config(self.root / "nbgrader_config.py", _stamp(self.root / "nbgrader_config.py"))

    def assignments(self) -> list[str]:
        if not self.source.is_dir():
            return []
        return sorted(p.name for p in self.source.iterdir() if p.is_dir() and self.notebooks(p.name))

    def source_notebook(self, aid: str, nb: str | None = None) -> Path:
        path = self.source / aid / f"{self.notebook(aid, nb)}.ipynb"
        if not path.is_file():
            if not (self.source / aid).is_dir() or not self.notebooks(aid):
                known = ", ".join(self.assignments()) or "none"
                raise FileNotFoundError(f"no assignment {aid!r} in {self.source} (known: {known})")
            raise FileNotFoundError(
                f"{aid} has no notebook {path.name} (it has: {', '.join(self.notebooks(aid))})"
            )
        return path

    def release_notebook(self, aid: str, nb: str | None = None) -> Path:
        return self.release / aid / f"{self.notebook(aid, nb)}.ipynb"

    def read_source(self, aid: str, nb: str | None = None) -> nbformat.NotebookNode:
        return nbformat.read(str(self.source_notebook(aid, nb)), as_version=4)

    def copy(
        self,
        aids: list[str],
        root: Path | None = None,
        prefix: str = "dlcourse-course-",
        cache_root: Path | None = None,
    ) -> Course:
        """A new course at ``root`` (default: a fresh temporary folder) holding the sources of ``aids``
        (samples included) and this course's nbgrader configuration: the one way a throwaway course is
        made (``run``, ``demo``, benchmarks, tests). It has its own SQLite gradebook, never this course's
        (nor ``$DLCOURSE_DB_URL``), and shares this course's cache of references and canaries unless given
        ``cache_root``; and its secret seed (:meth:`seed_file`). Not yet released: ``autograder.intake.release.release(copy, aids)``."""
        root = Path(root) if root else Path(tempfile.mkdtemp(prefix=prefix))
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.root / "nbgrader_config.py", root / "nbgrader_config.py")
        for aid in aids:
            self.source_notebook(
                aid, self.notebooks(aid)[0] if self.notebooks(aid) else None
            )  # a clear error
            shutil.copytree(self.source / aid, root / "source" / aid)
        copied = Course(root=root, db=sqlite_url(root / GRADEBOOK), cache_root=cache_root or self.cache)
        # the same secret seed: the same held-out data and measured inputs, so the same grade as this course gives
        # (and one reference for both in a shared cache, whose key holds the seed)
        copied.work.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.seed_file(), copied.work / SEED_FILE)
        return copied


def _stamp(path: Path) -> tuple:
    try:
        info = path.stat()
        return (info.st_mtime_ns, info.st_size)
    except OSError:
        return ()


@functools.lru_cache(maxsize=32)
def _load_config(path: Path, _stamp: tuple):
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    if not path.is_file():
        return Config()
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_graded_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution") and cell.get("cell_type") == "code"


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


DEMONSTRATION = (
    "demonstration"  # metadata.dlcourse.demonstration on a read-only cell: the grader never runs it
)
NOT_MEASURED = (
    "not_measured"  # metadata.dlcourse.not_measured on a read-only cell: left out of measured runs only
)


def demonstration(cell) -> bool:
    """A read-only code cell (nbgrader locked, no answer, no test) that the source marks
    ``metadata.dlcourse.demonstration``: something the student runs and learns from, which earns no autograded
    point, such as A8's scaling sweep (three models trained: 11 s of every run, and of every capped run's CPU
    allowance). The grader runs it in none of its runs: neither the reference's nor a hand-in's, nor a measured
    cell's. Repair puts read-only cells back from the source, so the mark is the source's; leaving a cell out only
    takes code away, so a hand-in that claims the mark for a cell of its own gains nothing by it; and the
    conventions (:mod:`autograder.intake.conventions`) and the reference's build refuse a source whose later cells read a name a
    demonstration defines."""
    return read_only_marked(cell, DEMONSTRATION)


def read_only_marked(cell, key: str) -> bool:
    """Whether ``cell`` is a read-only code cell (locked, no answer, no test) with ``metadata.dlcourse[key]``."""
    meta = nbgrader_meta(cell)
    return (
        cell.cell_type == "code"
        and bool(cell.metadata.get("dlcourse", {}).get(key))
        and bool(meta.get("locked"))
        and not meta.get("solution")
        and not meta.get("grade")
    )


def demonstration_problems(notebook) -> list[str]:
    """Why the grader cannot leave ``notebook``'s demonstrations out of its runs: a later cell that is not one
    itself reads a name a demonstration assigns (read before that cell assigns it, as far as its text says), so
    that leaving it out would change what that cell does; or a demonstration's code does not parse. [] if none."""
    import ast

    found: list[str] = []
    defined: dict[str, str] = {}  # name -> the demonstration that assigns it
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        gid = nbgrader_meta(cell).get("grade_id") or "an unnamed cell"
        try:
            tree = ast.parse(_python(cell.source))
        except SyntaxError:
            if demonstration(cell):
                found.append(f"demonstration {gid} does not parse")
            continue
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        stored |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        stored |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}  # fmt: skip
        stored |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}  # a function's parameters
        if demonstration(cell):
            defined.update(dict.fromkeys(stored, gid))
            continue
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for name in sorted((loaded - stored) & set(defined)):
            found.append(
                f"cell {gid} reads {name!r}, which demonstration {defined[name]} assigns: the grader does not "
                "run a demonstration, so a later cell must not need it (assign it in a cell the grader runs)"
            )
        for name in stored:
            defined.pop(name, None)  # assigned again: later reads are this cell's
    return found


def _python(source: str) -> str:
    """A cell's text as Python: IPython's magics and shell lines (``%``, ``!``) as comments."""
    return "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def is_written(cell) -> bool:
    """An answer graded by hand in formgrader (never a case of the reference): a markdown answer cell with
    points (this course's written answers: the source holds the rubric and a model answer between
    ``### BEGIN SOLUTION`` and ``### END SOLUTION``; the release shows nbgrader's text stub), and as
    nbgrader has them, a code answer cell with points ("manually graded answer") or a task cell."""
    meta = nbgrader_meta(cell)
    if not meta.get("grade") and not meta.get("task"):
        return False
    return bool(meta.get("task")) or is_solution(cell)
