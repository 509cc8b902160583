"""What goes back: from recorded results to what students and instructors read.

:mod:`.feedback` writes each student's pages; :mod:`.gradesheet` and :mod:`.export` the grades with the late
rule applied (CSV, the gradebook, an LMS); :mod:`.report` the class's report; :mod:`.similarity` the pairs of
answers worth a look; :mod:`.jupyter_csp` the content-security policy of the Jupyter server an instructor
grades in. Nothing here runs student code.

May import: the vocabulary, :mod:`autograder.intake`, :mod:`autograder.grading` and this wing."""
