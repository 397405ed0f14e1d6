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

.PHONY: install demo test test-fast bench clean ui ui-down

$(STAMP): pyproject.toml constraints/gpu-worker.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, alone: `pip install torch==2.13.0` takes the local CPU build instead of CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	# Under the GPU image's pins (transformers, tokenizers, numpy, ray, lance, …): CI tests what GPU nodes run.
	$(BIN)/pip install -q -c constraints/gpu-worker.txt torch==2.13.0 -e '.[dev]'
	# bubblewrap sandboxes code rewards (evr1/rewards/sandbox.py); installed when missing and we are root.
	if ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; fi; \
	  command -v bwrap >/dev/null || echo "warning: bubblewrap (bwrap) is missing: code rewards will refuse to run"; \
	fi
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

# The Prefect server, a `local` worker and the MLflow UI of $(CONF)'s run folder; `make ui-down` stops them.
ui: $(STAMP)
	$(BIN)/evr1 services up $(CONF)

ui-down:
	$(BIN)/evr1 services down

clean:
	rm -rf runs .pytest_cache
