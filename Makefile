# One command to set up and run a real estimate, one to run the tests (see README).
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: quickstart setup native test bench

quickstart: setup
	$(BIN)/parasim memory scenarios/llama3-70b-64xh100.toml

$(BIN)/parasim:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install ".[test,torch]"

# the compiled replay loops also in this source tree, which the tests import (setuptools skips an
# up-to-date build)
native: $(BIN)/parasim
	$(BIN)/python setup.py -q build_ext --inplace

setup: $(BIN)/parasim native

test: setup
	$(BIN)/python -m pytest

bench: setup
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done
