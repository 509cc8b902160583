"""Where things live: the course directory, its assignments, and the grader's workspace."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Course:
    """A course directory laid out as nbgrader expects, with the release directory ``assignments``."""

    root: Path = ROOT
    workspace: Path | None = None
    db: str | None = (
        None  # a gradebook URL; default: $DLCOURSE_DB_URL for this course, else SQLite in the root
    )
    cache_root: Path | None = None  # references and canaries; a throwaway copy shares its origin's

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def release(self) -> Path:
        return self.root / "assignments"

    @property
    def work(self) -> Path:
        """The grader's own files (references, runs, results); git-ignored, never visible to students."""
        return self.workspace or self.root / ".grading"

    @property
    def cache(self) -> Path:
        """What the grader computed from the sources and may reuse: references and canary results, each
        keyed by the source, the grading code and the machine's software and device."""
        return self.cache_root or self.root / ".grading" / "cache"

    @property
    def reference_dir(self) -> Path:
        return self.cache / "reference"

    # ----------------------------------------------------------------- one home for each path of the layout

    def submission(self, aid: str, sid: str) -> Path:
        """Where nbgrader (and ``collect``) keep a student's hand-in."""
        return self.root / "submitted" / sid / aid / f"{aid}.ipynb"

    def submitted(self, aid: str) -> dict[str, Path]:
        """Student id -> hand-in, for every student who has handed in ``aid``."""
        base = self.root / "submitted"
        paths = sorted(base.glob(f"*/{aid}/{aid}.ipynb")) if base.is_dir() else []
        return {path.parent.parent.name: path for path in paths}

    def executed(self, aid: str, sid: str) -> Path:
        """The notebook as the grader ran it, where formgrader looks for it."""
        return self.root / "autograded" / sid / aid / f"{aid}.ipynb"

    def results_dir(self, aid: str) -> Path:
        return self.work / "results" / aid

    def result(self, aid: str, sid: str) -> Path:
        """The grader's record of one submission (JSON), written last: it marks the submission done."""
        return self.results_dir(aid) / f"{sid}.json"

    def kept_run(self, aid: str, sid: str) -> Path:
        """What a submission's run captured (its cases' values, the kernel's summary), kept so that a
        regrade can decide the points again without running the student's code."""
        return self.work / "runs" / aid / sid

    def feedback_page(self, aid: str, sid: str) -> Path:
        return self.root / "feedback" / sid / aid / f"{aid}.html"

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
        return self.db or os.environ.get("DLCOURSE_DB_URL") or "sqlite:///" + str(self.root / "gradebook.db")

    def assignments(self) -> list[str]:
        return sorted(p.name for p in self.source.iterdir() if (p / f"{p.name}.ipynb").is_file())

    def source_notebook(self, aid: str) -> Path:
        path = self.source / aid / f"{aid}.ipynb"
        if not path.is_file():
            known = ", ".join(self.assignments()) or "none"
            raise FileNotFoundError(f"no assignment {aid!r} in {self.source} (known: {known})")
        return path

    def release_notebook(self, aid: str) -> Path:
        return self.release / aid / f"{aid}.ipynb"

    def read_source(self, aid: str) -> nbformat.NotebookNode:
        return nbformat.read(str(self.source_notebook(aid)), as_version=4)

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
        ``cache_root``. Not yet released: ``autograder.release.release(copy, aids)``."""
        root = Path(root) if root else Path(tempfile.mkdtemp(prefix=prefix))
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.root / "nbgrader_config.py", root / "nbgrader_config.py")
        for aid in aids:
            shutil.copytree(self.source_notebook(aid).parent, root / "source" / aid)
        return Course(
            root=root, db="sqlite:///" + str(root / "gradebook.db"), cache_root=cache_root or self.cache
        )


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_graded_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution") and cell.get("cell_type") == "code"


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))
