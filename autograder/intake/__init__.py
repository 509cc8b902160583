"""The way in: what comes from students and from the source before anything is graded.

:mod:`.collect` takes a class's hand-ins (nbgrader's exchange, an LMS export, a folder), with their identities
and times; :mod:`.late` the due dates, extensions and the late rule; :mod:`.handin` a submission's files and
digest; :mod:`.repair` and :mod:`.sanitize` what a student's bytes may become (a notebook rebuilt from the
release's cells; a page with nothing that runs); :mod:`.release`, :mod:`.notebooks`, :mod:`.samples`,
:mod:`.new` and :mod:`.conventions` the instructor's side: the student release, the sample submissions, a new
assignment and the rules a source must keep.

May import: the vocabulary (``autograder.course``, ``.result``, ``.settings``, ``.gradebook``, ``.files``,
``.progress``) and this wing. Nothing here runs student code or decides a point."""
