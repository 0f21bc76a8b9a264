# sharestate — `make` lists the targets.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py 2>/dev/null | cksum | cut -d' ' -f1)
AIRFLOW_STAMP := $(VENV)/.airflow-$(shell cat pyproject.toml setup.py 2>/dev/null | cksum | cut -d' ' -f1)
# pyspark-client (for Airflow's Spark provider) writes its files over pyspark's: same release only.
PYSPARK_CHECK := import importlib.metadata as m, pyspark; \
	v = {d: m.version(d) for d in ("pyspark", "pyspark-client")}; v["pyspark.__version__"] = pyspark.__version__; \
	print("pyspark check:", v); \
	assert len(set(v.values())) == 1 and pyspark.__version__.startswith("4.2."), "pyspark-client must be the release of pyspark"

.DEFAULT_GOAL := help
.PHONY: help install install-airflow jars demo test lint bench docs clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pipelines.class_archive
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP) ## create .venv and install sharestate with its dev dependencies

# The `airflow` extra on top of dev (a superset, so it marks $(STAMP) done too): Airflow 3 and
# its Spark provider, with pyspark kept at the release pyspark-client matches.
$(AIRFLOW_STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,airflow]'
	$(BIN)/python -c '$(PYSPARK_CHECK)'
	$(BIN)/python -m pipelines.class_archive
	rm -f $(VENV)/.installed-* $(VENV)/.airflow-* && touch $(STAMP) $(AIRFLOW_STAMP)

install-airflow: $(AIRFLOW_STAMP) ## install also Airflow 3 + the Spark provider (the DAG in airflow/ and its tests)

jars: ## fetch the pinned jars (Kafka brokers and tools, Delta) from Maven Central into the cache
	$(PYTHON) -m sharestate.jars fetch

demo: $(STAMP) ## run the main job on the embedded default (local Spark, Delta on local disk, simulated logs)
	$(BIN)/sharestate demo

test: $(AIRFLOW_STAMP) jars ## run the whole test suite (installs the airflow extra too, fetches the jars)
	$(BIN)/python -m pytest -q

lint: $(AIRFLOW_STAMP) ## ruff and mypy (mypy checks the DAG too: needs the airflow extra)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP) ## run the benchmarks (records/s; figures in docs/benchmarks.md)
	$(BIN)/python bench/decode.py
	$(BIN)/python bench/replay.py
	$(BIN)/python bench/pipeline.py

docs: $(STAMP) ## regenerate docs/configuration.md from the code
	$(BIN)/python -m pipelines.reference > docs/configuration.md

clean: ## remove build output, demo data and the virtualenv
	rm -rf build dist *.egg-info demo-data warehouse $(VENV)
