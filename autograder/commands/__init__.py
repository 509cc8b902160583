"""The commands: ``python -m autograder ...`` (:mod:`.cli`) and the workflows it runs (:mod:`.workflows`: grade,
collect, feedback, export), a regrade (:mod:`.regrade`), the doctor (:mod:`.doctor`) and Gradescope's entry
point (:mod:`.gradescope`). They chain the wings; nothing below imports them.

May import: anything in the package but :mod:`autograder.api` (the door other code uses)."""
