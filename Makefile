# The course's entry points. `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup demo lab test test-agreement test-load test-tools bench bench-quick gpu-check colab-check format strip release wheel doctor clean

## setup: create .venv and install the pinned environment and the project (skips when nothing changed)
setup: $(STAMP)

# $(call beat,WHAT,COMMAND): COMMAND with its own output, and a line every BEAT_S seconds while it runs (pip says
# nothing while it unpacks and installs: a minute or more for torch and TensorFlow). Its exit status is COMMAND's.
BEAT_S ?= 10
define beat
( n=0; while sleep 1; do n=$$((n + 1)); [ $$((n % $(BEAT_S))) -ne 0 ] || echo "  ... $(1): $$n s so far"; done ) & \
	beat=$$!; $(2); status=$$?; kill $$beat 2>/dev/null; exit $$status
endef

# pip's own progress: a line per package (and, off a terminal, each download's bar once it is done)
$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11 or newer is needed, found " + sys.version'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the pinned environment into $(VENV) (a few minutes the first time; pip's lines follow)"
	@$(call beat,pip,$(PY) -m pip install --disable-pip-version-check -r requirements.txt)
	@$(call beat,pip,$(PY) -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e .)
	@touch $(STAMP)

## demo: the main job: release every assignment, grade the bundled sample submissions, print the grade table
demo: setup
	$(PY) -m autograder demo

## lab: open JupyterLab on the course
lab: setup
	@mkdir -p .grading/exchange
	JUPYTER_CONFIG_PATH=$(CURDIR) $(VENV)/bin/jupyter lab --notebook-dir=.  # jupyter_server_config.py: the course's content-security policy

## test: lint, then the test suite on two workers (one BLAS thread each, for speed only: grades do not depend on it)
# TEST_MARKS: which markers; CI adds the agreement with plain nbgrader and the tests that load the machine
# (TEST_MARKS="not tooling": one session, whose tests share the assignments' references)
TEST_MARKS ?= not tooling and not agreement and not load
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@echo 'tests marked "$(TEST_MARKS)" (plain nbgrader agreeing: make test-agreement; the machine loaded: make test-load; the developers'"'"' tools: make test-tools)'
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist worksteal -m "$(TEST_MARKS)" $(PYTEST_ARGS)

## test-agreement: plain nbgrader's own autograde on the same hand-ins gives the scores this grader gives (marker agreement; CI runs it with make test)
test-agreement: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist worksteal -m agreement $(PYTEST_ARGS)

## test-load: a deadline's burst on a real service, and a grade unmoved by busy loops beside it (marker load; CI runs it with make test)
test-load: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist worksteal -m load $(PYTEST_ARGS)

## test-tools: the tests that run the developers' tools for real and time a warm parent's start (marker tooling: make bench --quick, a mutant graded, ...)
test-tools: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist worksteal -m tooling $(PYTEST_ARGS)

## bench: measure grading throughput, course run time and the lectures' speed claims (benchmarks/RESULTS.md)
bench: setup
	$(PY) -m benchmarks $(BENCH_ARGS)

bench-quick: setup
	$(PY) -m benchmarks --quick

## gpu-check: on a CUDA machine (a Colab GPU runtime): a sandboxed kernel on the GPU, A3, A5 and A7 graded, lectures 10, 12, 15 and 16, the GPU tests, FLOP/s
gpu-check: setup
	$(PY) -m benchmarks.gpu_check $(GPU_CHECK_ARGS)

## colab-check: every lecture and assignment source on Colab's versions (Python 3.13, torch 2.11, TF 2.20) beside ours; several GB, cached
colab-check: setup
	$(PY) -m benchmarks.colab_check $(COLAB_ARGS)

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## strip: remove outputs from every notebook in git
strip: setup
	$(VENV)/bin/nbstripout --keep-id $$(git ls-files '*.ipynb')

## doctor: what isolation the autograder has here, what is missing, and each assignment's canary
doctor: setup
	$(PY) -m autograder doctor

## release: regenerate the student releases from source/
release: setup
	$(PY) -m autograder release

## wheel: build the students' package, $(DIST)/dlcourse-<version>-py3-none-any.whl, offline (the asset the set-up cell installs)
# Only dlcourse goes in: it is staged alone, so the autograder (an instructor tool) stays out. Needs pip and
# setuptools in $(WHEEL_PY): the .venv's when there is one, else $(PYTHON) (CI: .github/workflows/release.yml).
DIST     ?= dist
WHEEL_PY ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
wheel:
	@stage=$$(mktemp -d) && trap 'rm -rf "$$stage"' EXIT && \
	cp -R pyproject.toml README.md dlcourse "$$stage"/ && \
	find "$$stage" -name __pycache__ -prune -exec rm -rf {} + && \
	mkdir -p $(DIST) && \
	PIP_NO_INDEX=1 $(WHEEL_PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		--wheel-dir $(DIST) "$$stage" && \
	ls $(DIST)/dlcourse-*-py3-none-any.whl

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
