"""The service: students hand in from the notebook (``dlcourse.submit``) and read what the hidden tests found in
seconds; the instructor watches the queue. :mod:`.store` keeps the tokens (as hashes) and every submission, durably,
before it is acknowledged (SQLite, or PostgreSQL); :mod:`.worker` proves the grader on each open assignment and
grades the queue on the course's own pipeline (here, or on a Dask cluster's workers), into the same gradebook the
command line uses; :mod:`.app` is the HTTP door (Starlette under
uvicorn), :mod:`.pages` what a browser sees there, :mod:`.status` the instructor's view of the queue and
:mod:`.refused` a refusal with its status and reason; :mod:`.config` the one settings file, ``service.toml``.

May import: the vocabulary, :mod:`autograder.runner`, :mod:`autograder.intake`, :mod:`autograder.grading`,
:mod:`autograder.outputs` and this wing."""
