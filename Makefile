# evr1 — the two commands a fresh clone needs: `make demo` and `make test`.
# Both create .venv and install everything first (CPU torch pinned; vLLM stays in the GPU image).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONF ?= conf/tiny.yaml
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-fast bench clean ui

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, alone: `pip install torch==2.13.0` takes the local CPU build instead of CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q torch==2.13.0 -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/evr1 run $(CONF)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --timeout=900 tests

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not e2e" tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_rewards.py

ui: $(STAMP)
	@echo "MLflow UI:  $(BIN)/mlflow ui --backend-store-uri sqlite:///runs/tiny/mlflow.db"
	@echo "Prefect UI: $(BIN)/prefect server start  (then open http://127.0.0.1:4200)"

clean:
	rm -rf runs .pytest_cache
