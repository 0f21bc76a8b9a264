# sharestate — `make` lists the targets.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py 2>/dev/null | cksum | cut -d' ' -f1)
AIRFLOW_STAMP := $(VENV)/.airflow-$(shell cat pyproject.toml setup.py 2>/dev/null | cksum | cut -d' ' -f1)
NATIVE_STAMP := $(VENV)/.native-$(shell cat setup.py csrc/*.c csrc/*.h 2>/dev/null | cksum | cut -d' ' -f1)
# The tests that compare with what Kafka's own code wrote (../shared/fixtures), which
# `make test-pure` runs once more on the pure-Python paths.
CONFORMANCE_TESTS := tests/test_decode_fixtures.py tests/test_schemas_fixtures.py \
	tests/test_log_conformance.py tests/test_coordinator_conformance.py \
	tests/test_group_fixtures.py tests/test_persister_parity.py
# pytest on PYTEST_WORKERS pytest-xdist workers (0: in this process alone), each test module's
# tests in one worker, and the modules that share a costly session fixture (a Kafka broker, a
# pipeline's warehouse) in one (tests/conftest.py: XDIST_GROUPS). Most tests wait on JVMs and
# subprocesses: two workers take the suite from about 31 minutes to about 20 on 2 cores.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile
# The C extension is required here: SHARESTATE_PURE_PYTHON is cleared for the build, so a
# failed build stops the install (setup.py).
PIP_INSTALL := SHARESTATE_PURE_PYTHON= $(BIN)/python -m pip install --quiet
# pyspark-client (for Airflow's Spark provider) writes its files over pyspark's: same release only.
PYSPARK_CHECK := import importlib.metadata as m, pyspark; \
	v = {d: m.version(d) for d in ("pyspark", "pyspark-client")}; v["pyspark.__version__"] = pyspark.__version__; \
	print("pyspark check:", v); \
	assert len(set(v.values())) == 1 and pyspark.__version__.startswith("4.2."), "pyspark-client must be the release of pyspark"

.DEFAULT_GOAL := help
.PHONY: help install install-airflow jars demo test test-pure lint check executor-env bench docs clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP_INSTALL) -e '.[dev]'
	$(BIN)/python -m sharestate.spark.class_archive
	rm -f $(VENV)/.installed-* $(VENV)/.native-* && touch $(STAMP) $(NATIVE_STAMP)

# The extension again when its sources change (an editable install builds it in place).
$(NATIVE_STAMP):
	@test -x $(BIN)/python || { echo "no $(VENV): run make install"; exit 2; }
	$(PIP_INSTALL) --no-deps -e .
	rm -f $(VENV)/.native-* && touch $(NATIVE_STAMP)

install: $(STAMP) $(NATIVE_STAMP) ## create .venv and install sharestate with its dev dependencies

# The `airflow` extra on top of dev (a superset, so it marks $(STAMP) done too): Airflow 3 and
# its Spark provider, with pyspark kept at the release pyspark-client matches.
$(AIRFLOW_STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP_INSTALL) -e '.[dev,airflow]'
	$(BIN)/python -c '$(PYSPARK_CHECK)'
	$(BIN)/python -m sharestate.spark.class_archive
	rm -f $(VENV)/.installed-* $(VENV)/.airflow-* $(VENV)/.native-*
	touch $(STAMP) $(AIRFLOW_STAMP) $(NATIVE_STAMP)

install-airflow: $(AIRFLOW_STAMP) $(NATIVE_STAMP) ## install also Airflow 3 + the Spark provider (the DAG in airflow/ and its tests)

jars: ## fetch the pinned jars (Kafka brokers and tools, Delta) from Maven Central into the cache
	$(PYTHON) -m sharestate.jars fetch

demo: $(STAMP) $(NATIVE_STAMP) ## run the main job on the embedded default (local Spark, Delta on local disk, simulated logs)
	$(BIN)/sharestate demo

test: $(AIRFLOW_STAMP) $(NATIVE_STAMP) jars ## run the whole test suite (installs the airflow extra too, fetches the jars)
	$(PYTEST)

test-pure: $(AIRFLOW_STAMP) ## run the Kafka-fixture conformance tests on the pure-Python paths
	SHARESTATE_PURE_PYTHON=1 $(PYTEST) $(CONFORMANCE_TESTS)

lint: $(AIRFLOW_STAMP) $(NATIVE_STAMP) ## ruff, mypy (the DAG too: needs the airflow extra), the import layers, the C stub against the extension
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m mypy.stubtest --mypy-config-file pyproject.toml sharestate._native

executor-env: $(STAMP) $(NATIVE_STAMP) ## pack the executors' Python environment for a Spark cluster (dist/sharestate-env.tar.gz)
	$(BIN)/python -m sharestate.spark.executor_env --out dist/sharestate-env.tar.gz

check: lint ## the contributor's loop: lint, then every test not marked slow or kafka_broker
	$(PYTEST) -m "not slow and not kafka_broker"

bench: $(STAMP) $(NATIVE_STAMP) jars ## run the benchmarks (records/s; figures in docs/benchmarks.md; serve.py runs a real Kafka broker)
	$(BIN)/python bench/decode.py
	$(BIN)/python bench/replay.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/resync.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/sql.py

docs: $(STAMP) $(NATIVE_STAMP) ## regenerate docs/configuration.md from the code
	$(BIN)/python -m sharestate.app.reference > docs/configuration.md

clean: ## remove build output, demo data and the virtualenv
	rm -rf build dist *.egg-info demo-data warehouse $(VENV) sharestate/_native.*.so
