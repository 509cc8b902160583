"""Grading: from a submission and the source to a result, every point decided outside the kernel.

:mod:`.reference` runs the source's solutions once and keeps what they computed and decided; :mod:`.canary`
proves the grader on the release and the solutions before a class is graded; :mod:`.pipeline` takes one
submission through its stages (repair, tamper scan, the sandboxed run, :mod:`.measure`'s measured cells, the
verdict of :mod:`.verify` with :mod:`.decisions`, :mod:`.evaluate` and :mod:`.heldout`); :mod:`.batch` runs a
class in parallel and resumably; :mod:`.record` keeps each result (the gradebook row and the file a batch
resumes from); :mod:`.nbgrader_hooks` lets ``nbgrader autograde`` use the same reference.

May import: the vocabulary, :mod:`autograder.runner`, :mod:`autograder.intake` and this wing."""
