# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use.
# `make docs` builds the documentation site into site/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.anyclip-installed
PYTEST_ARGS ?=
LINTED := src tests conformance benchmarks examples docs conftest.py

.PHONY: demo test docs bench conformance-data clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[numpy,torch,jax,optax,test,conformance,bench,docs]"
	touch $(STAMP)

## demo: set up .venv, show every function on every backend next to the frameworks' own
## functions, and a training loop ported from TF (well under two minutes; writes no files)
demo: $(STAMP)
	$(BIN)/python -m anyclip

## test: set up .venv, lint, run the whole test and conformance suite (which builds the docs
## site and checks it in headless Chromium: tests/test_docs_site.py)
test: $(STAMP)
	$(BIN)/python -m ruff check $(LINTED)
	$(BIN)/python -m ruff format --check $(LINTED)
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## docs: build the documentation site into site/; a warning is an error
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

## bench: time anyclip against each framework's own clipping; writes docs/performance.md
bench: $(STAMP)
	$(BIN)/python -m benchmarks

## conformance-data: regenerate conformance/data with TensorFlow
conformance-data: $(STAMP)
	$(BIN)/python conformance/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist site src/*.egg-info
