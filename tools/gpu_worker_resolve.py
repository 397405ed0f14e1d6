"""pip's resolver, run for the GPU worker image's platform, over constraints/gpu-worker.txt.

The image (`Dockerfile`) installs `pip install -r constraints/gpu-worker.txt` (flash-attn aside) on Linux
x86_64, glibc of its Ubuntu base, CPython `PYTHON_VERSION`: there `torch==2.13.0` is PyPI's CUDA wheel,
which pins triton, cuda-toolkit and the nvidia-* libraries exactly. A dependency set resolved on a
machine with the CPU torch never sees those pins. This tool resolves for the image instead, here:

    python tools/gpu_worker_resolve.py check      # exit 1 on any conflict; prints one JSON summary
    python tools/gpu_worker_resolve.py compile    # re-resolve constraints/gpu-worker.in, rewrite the pins

Both run `pip install --dry-run --ignore-installed --report` with `--only-binary=:all:`, one
`--platform` per manylinux tag the image's glibc accepts, `--python-version` of the image, and PyPI as
the only index (this machine's pip configuration, find-links and global constraints are ignored).
pip downloads wheel metadata only (PEP 658), no wheels.

Packages PyPI has only as an sdist (rouge-score, srt: pure Python) cannot be resolved with
`--platform`: their metadata is built here once, without `--platform`, and handed to the platform
resolution as a metadata-only stub wheel in a temporary find-links folder, so their own requirements
are resolved with the rest. The image builds them from the sdist. flash-attn is not resolved: the
Dockerfile compiles it in its own stage against the resolved torch.

`check` caches its summary under $TMPDIR/evr1-gpu-worker-resolve, keyed by the constraints file, the
Dockerfile's target and this file, so a second run is instant.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints" / "gpu-worker.txt"
INPUTS = ROOT / "constraints" / "gpu-worker.in"
DOCKERFILE = ROOT / "Dockerfile"
INDEX = "https://pypi.org/simple"
# Compiled in the Dockerfile's flash-attn stage against the installed torch; never resolved as a wheel.
BUILT_SEPARATELY = {"flash-attn"}
# glibc of the Ubuntu release the GPU image's nvidia/cuda base is built on.
GLIBC = {"ubuntu20.04": (2, 31), "ubuntu22.04": (2, 35), "ubuntu24.04": (2, 39)}
UNPINNED_DIRECTIVE = "# unpinned:"
CACHE = Path(tempfile.gettempdir()) / "evr1-gpu-worker-resolve"
# The torch wheel's exact pins that the constraints must repeat (checked by `check`).
TORCH_EXACT = ("triton", "cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cusparselt-cu13",
               "nvidia-nvshmem-cu13")


class ResolutionError(RuntimeError):
    pass


@dataclass(frozen=True)
class Target:
    python: str  # the image's CPython micro release, e.g. "3.11.18"
    glibc: tuple[int, int]

    def platforms(self) -> list[str]:
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
        return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]

    def pip_options(self) -> list[str]:
        out = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp",
               "--abi", "cp" + "".join(self.python.split(".")[:2])]
        for tag in self.platforms():
            out += ["--platform", tag]
        return out


def image_target(dockerfile: Path = DOCKERFILE) -> Target:
    """The GPU image's Python (its `ARG PYTHON_VERSION=`) and glibc (its nvidia/cuda base's Ubuntu)."""
    text = dockerfile.read_text()
    python = re.search(r"^ARG PYTHON_VERSION=(\d+\.\d+\.\d+)\s*$", text, re.M)
    base = re.search(r"nvidia/cuda:\S*-(ubuntu\d+\.\d+)", text)
    if not python or not base or base.group(1) not in GLIBC:
        raise SystemExit(f"{dockerfile}: needs `ARG PYTHON_VERSION=X.Y.Z` and an nvidia/cuda:…-ubuntuNN.NN base")
    return Target(python.group(1), GLIBC[base.group(1)])


def read_pins(path: Path = CONSTRAINTS) -> tuple[dict[str, str], set[str]]:
    """({canonical name: pinned version}, the names declared `# unpinned:` in the header)."""
    pins, unpinned = {}, set()
    for line in path.read_text().splitlines():
        if line.startswith(UNPINNED_DIRECTIVE):
            unpinned |= {canonicalize_name(n) for n in line[len(UNPINNED_DIRECTIVE):].split()}
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            if spec.operator != "==":
                raise SystemExit(f"{path.name}: {line!r} is not an exact pin")
            pins[canonicalize_name(req.name)] = spec.version
    return pins, unpinned


def _pip_env() -> dict[str, str]:
    """This process's environment without pip configuration (files, find-links, extra indexes, global
    constraints): PyPI alone, as the image's build sees it. The certificate bundle is kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip_dry_run(args: list[str], workdir: Path) -> tuple[int, dict | None, str]:
    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-input", "--progress-bar", "off",
           "--index-url", INDEX, "--report", str(report), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_pip_env(), cwd=workdir, check=False)
    data = json.loads(report.read_text()) if proc.returncode == 0 and report.exists() else None
    # pip prints why a resolution is impossible ("The conflict is caused by: …") on stdout
    cause = proc.stdout[proc.stdout.find("The conflict is caused by"):] if "The conflict is caused by" in proc.stdout else ""
    return proc.returncode, data, proc.stderr + ("\n" + cause if cause else "")


def _sdist_metadata(requirement: str, constraints: Path, workdir: Path) -> dict:
    """Metadata of `requirement` built from its sdist (no --platform: pip builds it here)."""
    name = Requirement(requirement).name
    rc, report, err = _pip_dry_run(["--no-deps", "--no-binary", name, "-c", str(constraints), requirement], workdir)
    if rc != 0 or not report or not report["install"]:
        raise ResolutionError(f"{requirement}: no wheel for the image's platform and no sdist either\n{_tail(err)}")
    return report["install"][0]["metadata"]


def _write_stub(meta: dict, folder: Path) -> Path:
    """A metadata-only wheel standing in for an sdist, so `--platform` resolution can use its requirements."""
    dist = re.sub(r"[-_.]+", "_", meta["name"]).lower()
    version = meta["version"]
    info = f"{dist}-{version}.dist-info"
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {version}"]
    if meta.get("requires_python"):
        lines.append(f"Requires-Python: {meta['requires_python']}")
    lines += [f"Provides-Extra: {e}" for e in meta.get("provides_extra") or []]
    lines += [f"Requires-Dist: {r}" for r in meta.get("requires_dist") or []]
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", "\n".join(lines) + "\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: evr1-stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def _suspects(err: str, requirements: list[str]) -> dict[str, str]:
    """{name: requirement} of the packages pip's failure names: those it found no distribution for,
    and those it "cannot install" (an sdist-only range shows up that way)."""
    texts = re.findall(r"No matching distribution found for (\S+)", err)
    for group in re.findall(r"Cannot install (.+?) because", err):
        texts += [t.strip() for t in re.split(r",| and ", group) if t.strip()]
    given = {canonicalize_name(Requirement(r).name): r for r in requirements}
    out = {}
    for text in texts:
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:  # "-r requirements.txt (line 3)" and the like
            continue
        out[name] = given.get(name, text)
    return out


def _has_platform_wheel(requirement: str, constraints: Path, target: Target, workdir: Path) -> bool:
    rc, _, _ = _pip_dry_run([*target.pip_options(), "--no-deps", "-c", str(constraints), requirement], workdir)
    return rc == 0


def _tail(text: str, n: int = 25) -> str:
    lines = [ln for ln in text.splitlines() if "is ignored: it is neither a file nor a directory" not in ln]
    return "\n".join(lines[-n:])


def sdist_marked(path: Path = CONSTRAINTS) -> list[str]:
    """The pins a constraints file marks `# sdist` (no wheel on PyPI), as `name==version`."""
    return [line.split("#")[0].strip() for line in path.read_text().splitlines()
            if line.split("#")[0].strip() and "# sdist" in line]


def resolve(requirements: list[str], constraints: list[str], target: Target,
            known_sdists: list[str] = ()) -> tuple[dict, dict[str, str]]:
    """pip's resolution of `requirements` under `constraints` for `target`: (pip's report, {name: version}
    of the packages resolved from an sdist). `known_sdists`: requirements known to have no wheel, given
    their stubs up front (a discovered one costs a failed resolution). Raises ResolutionError with
    pip's message on a conflict."""
    with tempfile.TemporaryDirectory(prefix="evr1-resolve-") as tmp:
        work = Path(tmp)
        stubs = work / "stubs"
        stubs.mkdir()
        (work / "requirements.txt").write_text("\n".join(requirements) + "\n")
        (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
        from_sdist: dict[str, str] = {}
        for req in known_sdists:
            meta = _sdist_metadata(req, work / "constraints.txt", work)
            _write_stub(meta, stubs)
            from_sdist[canonicalize_name(meta["name"])] = meta["version"]
        for _ in range(20):
            args = [*target.pip_options(), "--find-links", str(stubs),
                    "-r", str(work / "requirements.txt"), "-c", str(work / "constraints.txt")]
            rc, report, err = _pip_dry_run(args, work)
            if rc == 0 and report is not None:
                return report, from_sdist
            suspects = {n: r for n, r in _suspects(err, requirements).items() if n not in from_sdist}
            stubbed = False
            for name, req in sorted(suspects.items()):
                if _has_platform_wheel(req, work / "constraints.txt", target, work):
                    continue
                try:
                    meta = _sdist_metadata(req, work / "constraints.txt", work)
                except ResolutionError:
                    continue
                _write_stub(meta, stubs)
                from_sdist[name] = meta["version"]
                stubbed = True
            if not stubbed:
                raise ResolutionError(_tail(err))
        raise ResolutionError("too many sdist-only packages")


def _resolved(report: dict) -> dict[str, dict]:
    return {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}


def torch_exact_requirements(report: dict) -> dict[str, str]:
    """{name: version} of the `==` requirements of the resolved torch wheel (Linux markers), plus the
    nvidia-cuda-runtime pin of the cuda-toolkit release it names (`cudart` extra)."""
    items = _resolved(report)
    out = {}
    env = {"platform_system": "Linux", "sys_platform": "linux", "python_version": "3.11"}
    for line in items["torch"]["metadata"].get("requires_dist") or []:
        req = Requirement(line)
        if req.marker and not req.marker.evaluate({**env, "extra": ""}):
            continue
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            out[canonicalize_name(req.name)] = specs[0].version
    if "cuda-toolkit" in items:
        for line in items["cuda-toolkit"]["metadata"].get("requires_dist") or []:
            req = Requirement(line)
            if canonicalize_name(req.name) == "nvidia-cuda-runtime" and req.marker and \
                    req.marker.evaluate({**env, "extra": "cudart"}):
                (spec,) = req.specifier
                out["nvidia-cuda-runtime"] = spec.version.removesuffix(".*")
    return out


def check(constraints: Path = CONSTRAINTS, dockerfile: Path = DOCKERFILE, *, use_cache: bool = True) -> dict:
    """Resolve exactly the image's `pip install -r` set for its platform. Returns a summary with `ok`
    and `problems`; a conflict is a problem carrying pip's message."""
    target = image_target(dockerfile)
    key = hashlib.sha256(b"\0".join([constraints.read_bytes(), repr(target).encode(),
                                     Path(__file__).read_bytes()])).hexdigest()[:20]
    cached = CACHE / f"{key}.json"
    if use_cache and cached.exists():
        return json.loads(cached.read_text())
    pins, unpinned = read_pins(constraints)
    requirements = [f"{n}=={v}" for n, v in sorted(pins.items()) if n not in BUILT_SEPARATELY]
    summary = {"constraints": str(constraints.relative_to(ROOT) if constraints.is_relative_to(ROOT) else constraints),
               "python": target.python, "glibc": "{}.{}".format(*target.glibc), "index": INDEX, "pins": len(pins)}
    try:
        report, from_sdist = resolve(requirements, [], target, sdist_marked(constraints))
    except ResolutionError as e:
        return {**summary, "ok": False, "problems": [f"pip could not resolve the pins for the image:\n{e}"]}
    items = _resolved(report)
    problems = []
    for name, version in pins.items():
        if name in BUILT_SEPARATELY:
            continue
        got = items.get(name, {}).get("metadata", {}).get("version")
        if got != version:
            problems.append(f"{name}: pinned {version}, resolved {got}")
    extra = {n: i["metadata"]["version"] for n, i in items.items() if n not in pins}
    for name in sorted(set(extra) - unpinned):
        problems.append(f"{name}=={extra[name]} is installed in the image but not pinned")
    torch_url = items["torch"]["download_info"]["url"]
    if "+cpu" in torch_url or "manylinux" not in torch_url:
        problems.append(f"torch resolved to {torch_url}, not PyPI's CUDA wheel")
    exact = torch_exact_requirements(report)
    for name, version in exact.items():
        if name not in pins or Version(pins[name]) != Version(version):
            problems.append(f"torch {pins.get('torch')} requires {name}=={version}, the constraints pin {pins.get(name)}")
    summary.update(ok=not problems, problems=problems, resolved=len(items), from_sdist=from_sdist,
                   unpinned=extra, torch_wheel=torch_url.rsplit("/", 1)[-1], torch_exact=exact)
    if not problems:
        CACHE.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary


def compile_pins(inputs: Path = INPUTS, constraints: Path = CONSTRAINTS, dockerfile: Path = DOCKERFILE, *,
                 upgrade: list[str] = (), write: bool = True) -> dict:
    """Resolve `inputs` for the image, preferring today's pins except those matching an `upgrade`
    pattern (fnmatch on canonical names, e.g. 'nvidia-*'), and rewrite the pins of `constraints`
    (its header comment, `# unpinned:` line and flash-attn pin are kept). Returns the changes."""
    target = image_target(dockerfile)
    old, unpinned = read_pins(constraints)
    prefer = [f"{n}=={v}" for n, v in sorted(old.items())
              if n not in BUILT_SEPARATELY and not any(fnmatch.fnmatch(n, p) for p in upgrade)]
    requirements = [ln.split("#")[0].strip() for ln in inputs.read_text().splitlines()]
    requirements = [r for r in requirements if r]
    report, from_sdist = resolve(requirements, prefer, target, sdist_marked(constraints))
    new = {n: i["metadata"]["version"] for n, i in _resolved(report).items() if n not in unpinned}
    new |= {n: v for n, v in old.items() if n in BUILT_SEPARATELY}
    header = []
    for line in constraints.read_text().splitlines():
        if line.split("#")[0].strip():
            break
        header.append(line)
    body = [f"{n}=={v}" + ("  # sdist: built in the image" if n in from_sdist else "") for n, v in sorted(new.items())]
    changes = {"changed": {n: f"{old[n]} -> {new[n]}" for n in sorted(set(old) & set(new)) if old[n] != new[n]},
               "added": {n: new[n] for n in sorted(set(new) - set(old))},
               "removed": {n: old[n] for n in sorted(set(old) - set(new))},
               "from_sdist": from_sdist}
    if write:
        constraints.write_text("\n".join(header + body) + "\n")
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="resolve the constraints for the image; exit 1 on any conflict")
    c.add_argument("--constraints", type=Path, default=CONSTRAINTS)
    c.add_argument("--no-cache", action="store_true")
    k = sub.add_parser("compile", help="re-resolve constraints/gpu-worker.in and rewrite the pins")
    k.add_argument("--upgrade", action="append", default=[], metavar="PATTERN",
                   help="release today's pin of matching packages (fnmatch, e.g. 'nvidia-*'); repeatable")
    k.add_argument("--dry", action="store_true", help="print the changes, write nothing")
    args = parser.parse_args(argv)
    if args.command == "check":
        summary = check(args.constraints, use_cache=not args.no_cache)
        print(json.dumps(summary))
        return 0 if summary["ok"] else 1
    try:
        changes = compile_pins(upgrade=args.upgrade, write=not args.dry)
    except ResolutionError as e:
        print(f"pip could not resolve {INPUTS.name} for the image:\n{e}", file=sys.stderr)
        return 1
    print(json.dumps(changes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
