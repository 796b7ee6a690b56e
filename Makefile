# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.anyclip-installed
PYTEST_ARGS ?=
LINTED := src tests conformance benchmarks examples docs conftest.py

.PHONY: demo test bench conformance-data clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[numpy,torch,jax,optax,test,conformance,bench]"
	touch $(STAMP)

## demo: set up .venv, show every function on every backend, run the conformance report
demo: $(STAMP)
	$(BIN)/python -m anyclip
	$(BIN)/python -m anyclip conformance

## test: set up .venv, lint, run the whole test and conformance suite
test: $(STAMP)
	$(BIN)/python -m ruff check $(LINTED)
	$(BIN)/python -m ruff format --check $(LINTED)
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## bench: time anyclip against each framework's own clipping; writes docs/performance.md
bench: $(STAMP)
	$(BIN)/python -m benchmarks

## conformance-data: regenerate conformance/data with TensorFlow
conformance-data: $(STAMP)
	$(BIN)/python conformance/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build src/*.egg-info
