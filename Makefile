# sharestate — `make` lists the targets.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py 2>/dev/null | cksum | cut -d' ' -f1)

.DEFAULT_GOAL := help
.PHONY: help install demo test lint bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP) ## create .venv and install sharestate with its dev dependencies

demo: $(STAMP) ## run the main job on the embedded default (local Spark, Delta on local disk, simulated logs)
	$(BIN)/sharestate demo

test: $(STAMP) ## run the whole test suite
	$(BIN)/python -m pytest -q

lint: $(STAMP) ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP) ## run the benchmarks (prints records/s)
	$(BIN)/python bench/decode.py

clean: ## remove build output, demo data and the virtualenv
	rm -rf build dist *.egg-info demo-data warehouse $(VENV)
