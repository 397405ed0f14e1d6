"""The GPU worker image and CI share one dependency set (constraints/gpu-worker.txt): every third-party
module evr1 imports is in it, every pin agrees with pyproject.toml's ranges, the Dockerfile and the
Makefile both install from it, and the image's CUDA base matches the CUDA the pinned packages are
built for. The image is not built here (no Docker daemon); this checks what it would install."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints" / "gpu-worker.txt"
# Files only the flow's process runs (the `evr1` command starts Prefect flows; run plots are drawn for
# MLflow by the pipeline); what they import is the orchestration image's business, not the GPU worker's.
FLOW_SIDE_FILES = {"cli.py", "plots.py"}
# GPU-only modules that are not installed on CPU machines, by their distribution.
NOT_INSTALLED_HERE = {"vllm": "vllm", "flash_attn": "flash-attn"}


def pins() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{CONSTRAINTS.name}: {line!r} is not an exact pin"
            out[canonicalize_name(req.name)] = spec.version
    return out


def imported_modules() -> set[str]:
    mods: set[str] = set()
    for path in (ROOT / "evr1").rglob("*.py"):
        if path.parent.name == "evr1" and path.name in FLOW_SIDE_FILES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return mods - set(sys.stdlib_module_names) - {"evr1", "__future__"}


def test_every_module_evr1_imports_is_in_the_image():
    pinned, dists = pins(), md.packages_distributions()
    missing = []
    for mod in sorted(imported_modules()):
        names = {canonicalize_name(d) for d in dists.get(mod, [])} or {NOT_INSTALLED_HERE.get(mod, mod)}
        if not names & set(pinned):
            missing.append(f"{mod} (from {sorted(names)})")
    assert not missing, f"imported by evr1 but not in {CONSTRAINTS.name}: {missing}"
    assert {"cramjam", "vllm", "transformers", "torch", "flash-attn"} <= set(pinned)


def test_pins_agree_with_pyproject_and_with_what_is_installed():
    pinned = pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name in pinned:
            assert req.specifier.contains(pinned[name], prereleases=True), f"pyproject {line!r} vs pin {pinned[name]}"
    # CI runs the GPU-side code on exactly the image's versions (installed with `-c constraints/gpu-worker.txt`).
    for name in ("transformers", "tokenizers", "numpy", "pyarrow", "pylance", "ray", "av", "cramjam", "safetensors"):
        installed = md.version(name).split("+")[0]
        assert installed == pinned[name], f"{name} {installed} is installed, the image has {pinned[name]}"


def test_dockerfile_and_makefile_install_from_the_constraints():
    docker = (ROOT / "Dockerfile").read_text()
    assert "constraints/gpu-worker.txt" in docker and "pip install -r" in docker
    assert "constraints/gpu-worker.txt" in (ROOT / "Dockerfile.orchestration").read_text()
    assert "-c constraints/gpu-worker.txt" in (ROOT / "Makefile").read_text()
    # torch 2.13.0 from PyPI is built for CUDA 13: the base image's toolkit and the CUDA runtime the
    # resolution pulled in are the same major version.
    base = re.search(r"^FROM nvidia/cuda:(\d+)\.", docker, re.M)
    assert base, "the GPU image must build FROM an nvidia/cuda base"
    assert pins()["nvidia-cuda-runtime"].split(".")[0] == base.group(1)


def test_the_smoke_check_passes_on_the_cpu_side():
    from evr1.cli.smoke import check

    found = check(cuda=False, vllm=False)
    assert found["transformers"] == pins()["transformers"] and "cramjam" in found
