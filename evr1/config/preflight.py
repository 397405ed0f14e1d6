"""Checks of what a config names outside itself, before any work starts: paths, model folders, services.

Validation (`load.py`) proves a config is well formed; it cannot know that `data.train_files` names a
file that is not there, or that `orchestration.ray_address` answers nobody. Without these checks a
run found out a minute in, after Prefect and Ray had started and stages had run, under two
tracebacks. `preflight(cfg)` finds every such problem in a second or two and returns one line per
problem, each naming the key, the value and what was expected.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

from evr1.config.root import Config

CONNECT_TIMEOUT_S = 3.0
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")


def _readable_file(key: str, value: str, *, folder_ok: bool = False) -> str | None:
    """A readable file (`folder_ok`: or a folder, as a dataset source whose data files are all read)."""
    path = Path(value).expanduser()
    if folder_ok and path.is_dir():
        return _folder(key, value)
    what = "a file or a folder" if folder_ok else "a file"
    if not path.exists():
        return f"{key}={value}: no such {what.replace('a ', '')}"
    if not path.is_file():
        return f"{key}={value}: expected {what}, found a {'folder' if path.is_dir() else 'special file'}"
    if not os.access(path, os.R_OK):
        return f"{key}={value}: the file is not readable"
    return None


def _folder(key: str, value: str) -> str | None:
    path = Path(value).expanduser()
    if not path.is_dir():
        return f"{key}={value}: expected a folder, {'found a file' if path.exists() else 'none there'}"
    if not os.access(path, os.R_OK | os.X_OK):
        return f"{key}={value}: the folder is not readable"
    return None


def model_folder_problem(key: str, value: str) -> str | None:
    """A Hugging Face model folder: config.json, a tokenizer and weights (any of the usual names)."""
    problem = _folder(key, value)
    if problem:
        return problem
    path = Path(value).expanduser()
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        missing.append(f"a tokenizer ({' or '.join(TOKENIZER_FILES)})")
    if not any(next(path.glob(p), None) for p in WEIGHT_PATTERNS):
        missing.append("weights (*.safetensors)")
    if missing:
        return f"{key}={value}: not a Hugging Face model folder, it lacks {', '.join(missing)}"
    return None


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def ray_address_problem(address: str) -> str | None:
    """`auto` needs a Ray instance started on this machine; `host:port` and `ray://host:port` an answer."""
    key = "orchestration.ray_address"
    if address == "auto":
        if not Path("/tmp/ray/ray_current_cluster").exists() and "RAY_ADDRESS" not in os.environ:
            return f"{key}=auto: no Ray instance runs on this machine (start one with `ray start --head`, or unset the key for a local one)"
        return None
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    if not parsed.hostname or not parsed.port:
        return f"{key}={address}: expected host:port or ray://host:port"
    if not _reachable(parsed.hostname, parsed.port):
        return (f"{key}={address}: nothing answers at {parsed.hostname}:{parsed.port} within "
                f"{CONNECT_TIMEOUT_S:g} s (is the Ray head running, and is the port open?)")
    return None


def tracking_uri_problem(uri: str) -> str | None:
    """An http(s) tracking server must answer; a sqlite or file store must be creatable."""
    key = "tracking.uri"
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https"):
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if not parsed.hostname or not _reachable(parsed.hostname, port):
            return f"{key}={uri}: no tracking server answers at {parsed.hostname}:{port} within {CONNECT_TIMEOUT_S:g} s"
        return None
    if parsed.scheme == "sqlite":
        target = Path(uri.removeprefix("sqlite:///")).parent
    elif parsed.scheme in ("", "file"):
        target = Path(parsed.path or uri)
    else:
        return None  # databricks, postgresql, …: the client says what it needs
    existing = next((p for p in [target, *target.parents] if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK):
        return f"{key}={uri}: cannot create {target} (no write access to {existing})"
    return None


def _code_families(cfg: Config) -> Iterator[str | None]:
    for i, ref in enumerate(cfg.reward.families):
        path, sep, _ = ref.partition(":")
        if sep and (path.endswith(".py") or "/" in path):
            yield _readable_file(f"reward.families[{i}]", path)


def _data(cfg: Config) -> Iterator[str | None]:
    d = cfg.data
    if d.synth is None:
        if not d.train_files:
            yield "data.train_files=[]: expected at least one dataset file (JSON, JSONL or Parquet), or data.synth for a synthetic set"
        for i, f in enumerate(d.train_files):
            yield _readable_file(f"data.train_files[{i}]", f, folder_ok=True)
        for i, f in enumerate(d.eval_files):
            yield _readable_file(f"data.eval_files[{i}]", f, folder_ok=True)
        for i, f in enumerate(d.test_files):
            yield _readable_file(f"data.test_files[{i}]", f, folder_ok=True)
    if d.data_root:
        yield _folder("data.data_root", d.data_root)


def _eval(cfg: Config) -> Iterator[str | None]:
    e = cfg.eval
    if not e.enabled:
        return
    for name, f in sorted(e.files.items()):
        yield _readable_file(f"eval.files.{name}", f)
    for key, value in (("eval.annotations_dir", e.annotations_dir), ("eval.data_dir", e.data_dir)):
        if value:
            yield _folder(key, value)
    for name, root in sorted(e.video_roots.items()):
        yield _folder(f"eval.video_roots.{name}", root)
    judge = e.judge
    if judge.enabled and judge.model_path:
        yield model_folder_problem("eval.judge.model_path", judge.model_path)


def _checkpoint(key: str, value: str) -> str | None:
    """A checkpoint folder (`step_N` with its state file) or a run's checkpoint folder (with a `latest`)."""
    path = Path(value)
    if not (path / "trainer_state.json").exists() and not any(path.glob("step_*/trainer_state.json")):
        return f"{key}={value}: no checkpoint there (expected a step_N folder or a run's checkpoints/<fingerprint> folder)"
    return None


CHECKS: dict[str, Callable[[Config], Iterator[str | None]]] = {
    "data": _data,
    "model": lambda cfg: iter([model_folder_problem("model.path", cfg.model.path) if cfg.model.path else None]),
    "reward": _code_families,
    "eval": _eval,
    "trainer": lambda cfg: iter([_checkpoint("trainer.init_from", cfg.trainer.init_from)
                                 if cfg.trainer.init_from else None]),
    "orchestration": lambda cfg: iter([ray_address_problem(cfg.orchestration.ray_address)
                                       if cfg.orchestration.ray_address else None]),
    "tracking": lambda cfg: iter([tracking_uri_problem(cfg.tracking.uri)
                                  if cfg.tracking.enabled and cfg.tracking.uri else None]),
}


def preflight(cfg: Config, sections: tuple[str, ...] | None = None) -> list[str]:
    """Every problem with what `cfg` names outside itself, one line each (empty: none found).

    `sections` limits the checks to what a command uses (`evr1 eval` does not read the training data);
    None checks everything."""
    return [p for name, check in CHECKS.items() if sections is None or name in sections
            for p in check(cfg) if p]
