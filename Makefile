# One check for developers and CI: lint (ruff), layering (import-linter), types (mypy), tests (pytest).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-dev lint test check demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-dev: $(BIN)/python
	$(BIN)/pip install -q -c constraints-cpu.txt -e '.[dev,torch]'

lint: install-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy

# The ledger's tests run against a real PostgreSQL too: ensure-postgres.sh installs it when missing
# (a fresh Debian CI clone), and COMPUTEWISE_REQUIRE_POSTGRES=1 turns "not found" into a failure.
# --dist loadgroup keeps the tests marked xdist_group("ray") on one worker: one local Ray cluster, not two.
test: lint
	bash scripts/ensure-postgres.sh
	COMPUTEWISE_REQUIRE_POSTGRES=1 $(BIN)/pytest -n 2 --dist loadgroup

demo: install
	$(BIN)/computewise plan train --model llama-3-8b --tokens 20B --deadline 7d

bench: install-dev
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/ledger_ingest.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
