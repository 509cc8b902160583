"""Where student code runs: one sandboxed child per notebook (:mod:`.sandbox`), started by a launcher
(:mod:`.launchers`: spawned, in bubblewrap, or forked from a warm parent, :mod:`.forkserver`) into the
isolation the batch resolved (:mod:`.isolation`, :mod:`.visibility`, :mod:`.linux`), watched against its
limits (:mod:`.watchdog`), driven by :mod:`.child`, and heard from only through one bounded report
(:mod:`.protocol`). What the grader asks of a sandbox is an interface (:mod:`.interface`), so another runner,
or a test's prepared runs, can take its place. Nothing here decides a point. This file imports nothing, so a
child loads only what it uses.

May import: the vocabulary (``autograder.course``, ``.result``, ``.settings``) and this wing."""
