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
	$(BIN)/pip install -q -c constraints-cpu.txt -c constraints-dev.txt -e '.[dev,torch]'

lint: install-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy

# The ledger's tests run against a real PostgreSQL too: ensure-postgres.sh installs it when missing
# (a fresh Debian CI clone), and COMPUTEWISE_REQUIRE_POSTGRES=1 turns "not found" into a failure.
# ensure-browser.sh and ensure-prometheus.sh do the same for Debian's chromium (+ chromium-driver), which
# the dashboard's browser tests drive, and prometheus, which scrapes `run` and `serve` in the Grafana test.
# --dist loadgroup keeps the tests marked xdist_group("ray") on one worker: one local Ray cluster, not two.
test: lint
	bash scripts/ensure-postgres.sh
	bash scripts/ensure-browser.sh
	bash scripts/ensure-prometheus.sh
	COMPUTEWISE_REQUIRE_POSTGRES=1 COMPUTEWISE_REQUIRE_BROWSER=1 COMPUTEWISE_REQUIRE_PROMETHEUS=1 $(BIN)/pytest -n 2 --dist loadgroup

demo: install
	$(BIN)/computewise plan train --model llama-3-8b --tokens 20B --deadline 7d

bench: install-dev
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/ledger_ingest.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
