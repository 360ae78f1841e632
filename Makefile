# One check for developers and CI: lint (ruff), layering (import-linter), types (mypy), tests (pytest).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-dev install-skypilot lint test check demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-dev: $(BIN)/python
	$(BIN)/pip install -q -c constraints-cpu.txt -c constraints-dev.txt -e '.[dev,torch]'

# SkyPilot's own task validator, which tests/scale/test_every_planned_job.py runs on every SkyPilot task a plan
# renders. A venv of its own: skypilot pins click<8.2 and uvicorn<0.36, which the project's lock does not allow.
# Reused while constraints-skypilot.txt (its lock, skypilot's pin included) is unchanged; the test downloads nothing.
SKY_VENV := .venv-skypilot

$(SKY_VENV)/installed: constraints-skypilot.txt
	$(PYTHON) -m venv $(SKY_VENV)
	$(SKY_VENV)/bin/pip install -q -c constraints-skypilot.txt skypilot
	touch $@

install-skypilot: $(SKY_VENV)/installed

lint: install-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy

# The ledger's tests run against a real PostgreSQL too: ensure-postgres.sh installs it when missing
# (a fresh Debian CI clone), and COMPUTEWISE_REQUIRE_POSTGRES=1 turns "not found" into a failure.
# ensure-browser.sh and ensure-prometheus.sh do the same for Debian's chromium (+ chromium-driver), which
# the dashboard's browser tests drive, and prometheus, which scrapes `run` and `serve` in the Grafana test.
# --dist loadgroup keeps the tests marked xdist_group("ray") on one worker: one local Ray cluster, not two
# (tests/test_xdist_groups.py fails when a pytest/pytest-xdist pair stops honouring the groups).
# COMPUTEWISE_SKYPILOT_PYTHON is SkyPilot's venv, and with it SkyPilot's validator is required, not skipped.
# --durations=30 prints the slowest tests at the end, so the CI log shows what to trim when the suite nears 45 min.
test: lint install-skypilot
	bash scripts/ensure-postgres.sh
	bash scripts/ensure-browser.sh
	bash scripts/ensure-prometheus.sh
	COMPUTEWISE_REQUIRE_POSTGRES=1 COMPUTEWISE_REQUIRE_BROWSER=1 COMPUTEWISE_REQUIRE_PROMETHEUS=1 \
	COMPUTEWISE_SKYPILOT_PYTHON=$(CURDIR)/$(SKY_VENV)/bin/python $(BIN)/pytest -n 2 --dist loadgroup --durations=30

demo: install
	$(BIN)/computewise plan train --model llama-3-8b --tokens 20B --deadline 7d

bench: install-dev
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/ledger_ingest.py

clean:
	rm -rf $(VENV) $(SKY_VENV) .mypy_cache .ruff_cache .pytest_cache
