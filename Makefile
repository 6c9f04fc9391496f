# One command to set up and run a real estimate, one to run the tests (see README).
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: quickstart setup test bench

quickstart: setup
	$(BIN)/parasim memory scenarios/llama3-70b-64xh100.toml

$(BIN)/parasim:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install ".[test,torch]"

setup: $(BIN)/parasim

test: setup
	$(BIN)/python -m pytest

bench: setup
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done
