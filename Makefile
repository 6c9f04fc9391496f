# One command to set up and run a real estimate, one to run the tests (see README).
#   make quickstart  virtualenv + parasim with its core dependencies (no torch, no test tools) + one estimate
#   make setup       the same virtualenv + test dependencies + torch (pinned, below) + compiled loops in tree
#   make test        setup, then pytest
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
# torch for the torch-backed tests, pinned here (not in the package's `torch` extra, which only sets a
# lower bound so that pip never replaces a user's own, e.g. CUDA, build): the version the tests are checked
# against. pip takes the CPU build where it is configured to (CI: its find-links hold 2.13.0+cpu).
TEST_TORCH ?= torch==2.13.0
# written once the test dependencies are in the virtualenv (inside it: a fresh virtualenv has none)
TEST_DEPS = $(VENV)/.parasim-test-deps

.PHONY: quickstart setup native test bench

quickstart: $(BIN)/parasim
	$(BIN)/parasim memory scenarios/llama3-70b-64xh100.toml

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# the package and its core dependencies only (what a user of the command needs)
$(BIN)/parasim: | $(BIN)/python
	$(BIN)/pip install .

# the package with the test dependencies and torch, in one install
$(TEST_DEPS): | $(BIN)/python
	$(BIN)/pip install ".[test,torch]" "$(TEST_TORCH)"
	touch $@

# the compiled replay loops also in this source tree, which the tests import (setuptools skips an
# up-to-date build)
native: $(TEST_DEPS)
	$(BIN)/python setup.py -q build_ext --inplace

setup: $(TEST_DEPS) native

test: setup
	$(BIN)/python -m pytest

bench: setup
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done
