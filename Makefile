# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use:
# `make demo` installs only what the demo shows (NumPy, torch, JAX, optax: no TensorFlow),
# `make test` everything the tests need (TensorFlow for the live checks among it).
# The demo's .venv is 1.21 GiB installed, 1.26 GiB once the demo has run (measured with torch
# 2.13.0+cpu and jaxlib 0.10.2, `python -m benchmarks.newcomer`): torch (663 MiB) and jaxlib
# (341 MiB) alone are 0.98 GiB without bytecode, and JAX needs SciPy (109 MiB), so 1 GB cannot
# be reached with both frameworks. --no-compile leaves out the bytecode of every module the demo
# never imports (pip's default wrote 200 MB of .pyc, 1.39 GiB in all, and took longer to install
# than the demo's first run takes to compile what it imports); --no-cache-dir keeps no second
# copy of the wheels in pip's cache.
# `make docs` builds the documentation site into site/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.anyclip-installed
DEMO_STAMP := $(VENV)/.anyclip-demo-installed
DEMO_EXTRAS := all
PYTEST_ARGS ?=
# pytest-xdist workers: one per CPU this process may run on (`nproc` counts the CPU affinity;
# xdist's `-n auto` counts physical cores through psutil, which the venv has, and ignores the
# affinity). Measured on the 2-core machine: see CONTRIBUTING.md, "Running the tests".
# `make test PYTEST_WORKERS=0` runs in one process.
PYTEST_WORKERS ?= $(shell nproc 2>/dev/null || echo auto)
# `--dist loadgroup`: tests spread over the workers one by one, except a module marked
# `xdist_group` (an expensive module-scoped fixture, or a build in the checkout), which one
# worker runs whole.
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup
LINTED := src tests conformance benchmarks examples docs conftest.py

# The backends docs/conformance.md is made on (CI's CPU set): the target fails if one is missing,
# and a backend that happens to be installed besides them does not change the report.
REPORT_BACKENDS := numpy,array_api_strict,torch,jax,dask

.PHONY: demo test check test-floors docs bench conformance-report conformance-data clean

$(STAMP): pyproject.toml conformance/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[numpy,torch,jax,optax,test,conformance,bench,docs,references]" -e "./conformance[live]"
	touch $(STAMP) $(DEMO_STAMP)

# The demo's lean install (a superset is already there once `make test` has run).
$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile --no-cache-dir --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile --no-cache-dir -c constraints.txt -e ".[$(DEMO_EXTRAS)]"
	touch $(DEMO_STAMP)

## demo: set up .venv with NumPy, torch, JAX and optax (no TensorFlow), show every function on
## every backend next to the frameworks' own functions, torch's and optax's clipping, and a
## training loop ported from TF on torch and on JAX with optax (writes no files)
demo: $(DEMO_STAMP)
	$(BIN)/python -m anyclip

## test: set up .venv, lint, run the whole test and conformance suite (which builds the docs
## site and checks it in headless Chromium: tests/test_docs_site.py)
test: $(STAMP)
	$(BIN)/python -m ruff check $(LINTED)
	$(BIN)/python -m ruff format --check $(LINTED)
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

## check: the quick loop while changing code (not what CI runs; `make test` is): ruff and mypy
## as `make test` runs them, then the tests of the files changed since this branch left main
## (committed or not, new files too; tests/changed_tests.py maps files to tests) on every
## backend, with the conformance catalogue's sample instead of every case.
## `make check CHECK_BASE=HEAD` looks only at what is not committed yet.
CHECK_BASE ?=
check: $(STAMP)
	$(BIN)/python -m ruff check $(LINTED)
	$(BIN)/python -m ruff format --check $(LINTED)
	$(BIN)/python -m mypy
	$(BIN)/python tests/changed_tests.py $(if $(CHECK_BASE),--base $(CHECK_BASE)) $(XDIST) $(PYTEST_ARGS)

## test-floors: the oldest versions pyproject.toml accepts (constraints-floors.txt), installed into
## .venv-floors, run on tests/version_sample.py's sample (every docstring example, every test
## function once, every module on every CPU backend; it fails when a public function was never
## called). Not part of `make test` or CI: torch 2.11 from PyPI is several GB of CUDA packages.
## The results, and those at the newest releases, are in docs/quickstart.md ("Tested versions").
FLOORS_VENV := .venv-floors
test-floors:
	test -x $(FLOORS_VENV)/bin/python || $(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOORS_VENV)/bin/python -m pip install --quiet -c constraints-floors.txt -e ".[numpy,torch,jax,optax,test]" -e ./conformance
	$(FLOORS_VENV)/bin/python tests/version_sample.py $(PYTEST_ARGS)

## docs: build the documentation site into site/; a warning is an error
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

## bench: time anyclip against each framework's own clipping; writes docs/performance.md
bench: $(STAMP)
	$(BIN)/python -m benchmarks

## conformance-report: run the conformance suite on every CPU backend; rewrites docs/conformance.md
conformance-report: $(STAMP)
	ANYCLIP_REQUIRE_BACKENDS=$(REPORT_BACKENDS) $(BIN)/python -m anyclip_conformance --backends $(REPORT_BACKENDS) --report docs/conformance.md

## conformance-data: regenerate the reference data (conformance/src/anyclip_conformance/data) with TensorFlow
conformance-data: $(STAMP)
	$(BIN)/python -m anyclip_conformance.generate

clean:
	rm -rf $(VENV) $(FLOORS_VENV) .pytest_cache .hypothesis build dist site src/*.egg-info conformance/build conformance/src/*.egg-info
