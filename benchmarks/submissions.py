"""The generated class: perfect, partial, blank and broken submissions of one assignment.

Made from the assignment's source and release with ``autograder.intake.samples``, so the set follows the
assignment when it changes. Kinds repeat in a fixed pattern, so that the first 10 or 20 submissions have
the same mix as all 40 (the scaling runs grade such prefixes); which answers a partial submission gives
is drawn with a fixed seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import nbformat

from autograder.api import Course, filled, solution_ids

PATTERN = (
    "perfect",
    "partial",
    "blank",
    "partial",
    "perfect",
    "broken",
    "partial",
    "perfect",
    "partial",
    "blank",
)
HONEST = ("perfect", "partial", "blank")


@dataclass(frozen=True)
class Submission:
    sid: str
    kind: str  # perfect, partial, blank, broken
    answered: tuple[str, ...]  # the answer cells filled in
    text: str  # the .ipynb file as handed in


def make_submissions(
    course: Course, aid: str, count: int, quick: bool = False, seed: int = 0
) -> list[Submission]:
    """``count`` submissions of ``aid`` (released in ``course``). ``quick``: a cheap mix for a smoke test
    (one partial that answers only the first part, a blank, two broken)."""
    ids = solution_ids(course, aid)
    rng = random.Random(f"{aid}-{seed}")
    perfect = nbformat.writes(filled(course, aid)) + "\n"
    blank = course.release_notebook(aid).read_text(encoding="utf-8")
    pattern = ("partial", "blank", "broken", "broken") if quick else PATTERN
    made = []
    for index in range(count):
        kind = pattern[index % len(pattern)]
        answered: tuple[str, ...] = ()
        if kind == "perfect":
            answered, text = tuple(ids), perfect
        elif kind == "partial":
            chosen = set(ids[:1]) if quick else set(rng.sample(ids, rng.randint(1, len(ids) - 1)))
            answered = tuple(i for i in ids if i in chosen)
            text = nbformat.writes(filled(course, aid, set(answered))) + "\n"
        elif kind == "blank":
            text = blank
        else:  # broken: a perfect notebook cut off halfway, as an interrupted upload leaves it
            text = perfect[: len(perfect) // 2]
        made.append(Submission(f"s{index:03d}-{kind}", kind, answered, text))
    return made


def write_submissions(course: Course, aid: str, made: list[Submission]) -> None:
    """Lay the submissions out as nbgrader expects: ``submitted/<sid>/<aid>/<aid>.ipynb``."""
    for sub in made:
        path = course.submission(aid, sub.sid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sub.text, encoding="utf-8")
