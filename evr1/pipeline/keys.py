"""What a cached stage result is keyed by: its config sections, upstream results, input files, the
run folder's token and the code the stage runs. Changing anything else does not re-run it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from evr1.config import Config
from evr1.pipeline import lineage
from evr1.pipeline.lineage import STAGE_SECTIONS
from evr1.pipeline.results import StageResult
from evr1.pipeline.runs import run_paths, run_token


def short_hash(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_stats(*paths: str | Path) -> list:
    """(name, size, mtime) of files and of the files directly in directories: a cheap change detector."""
    out = []
    for path in map(Path, paths):
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        out.extend((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())
    return out


def stage_key(stage: str, cfg: Config, upstream: list[StageResult], extra: object = None) -> str:
    """A cache key for a stage: its own config sections, its upstream results' content, its input files
    (sizes and mtimes) and the run folder's token. Changing anything else does not re-run it."""
    files: list = []
    if stage == "ingest":
        files = file_stats(*cfg.data.train_files, *cfg.data.eval_files, *(r.partition(":")[0] for r in cfg.reward.families))
        # The prompt-length check counts with the model's tokenizer and leaves room for the response.
        files.append(("prompt_limit", cfg.model.path, cfg.fingerprint("model"), cfg.rollout.max_new_tokens))
    elif stage == "model" and cfg.model.path and Path(cfg.model.path).exists():
        files = file_stats(cfg.model.path)
    elif stage == "eval":  # an edited annotation file is a new evaluation
        e = cfg.eval
        files = file_stats(*e.files.values(), *([e.annotations_dir] if e.annotations_dir else []))
        if upstream and isinstance(extra, str):
            # Items that failed last time (a timeout, an OOM) make the next flow run evaluate again, and
            # retry just those, instead of serving the cached summary with its failures.
            files.append(("failed", failed_items(eval_dir(cfg, upstream[0], extra) / "results.jsonl")))
        elif upstream and isinstance(extra, (list, tuple)):  # a suite: any benchmark's failures
            files += [("failed", failed_items(eval_dir(cfg, upstream[0], name) / "results.jsonl")) for name in extra]
    ups = [(u.stage, u.uri, u.version, u.content_hash) for u in upstream]
    return short_hash(stage, cfg.fingerprint(*STAGE_SECTIONS[stage]), cfg.run_dir(), run_token(cfg), ups, files, extra,
                 lineage.code_version(stage))


# Trainer options added after runs were saved: left out of the name while at these defaults, so adding
# one renames (and so orphans) no earlier run's checkpoints.
LATER_OPTIONS = {"init_from": None, "lr_milestones": [], "lr_gamma": 0.1}


def training_fingerprint(cfg: Config, samples: StageResult, frames: StageResult, model: StageResult) -> str:
    """Names the checkpoint folder: what shapes the weights. Steps, saving and validation settings are
    left out, so raising `trainer.steps` continues the same run instead of starting over."""
    data = cfg.model_dump(mode="json")
    trainer = {k: v for k, v in data["trainer"].items()
               if k not in ("steps", "save_every", "keep_last", "resume", "val_every", "val_limit",
                            "collective_timeout_s")
               and not (k in LATER_OPTIONS and v == LATER_OPTIONS[k])}
    sections = {k: data[k] for k in ("algorithm", "rollout", "reward", "model", "cache")}
    return short_hash(sections, trainer, cfg.run.seed, samples.content_hash, frames.content_hash, model.content_hash)


def eval_dir(cfg: Config, model: StageResult, benchmark: str) -> Path:
    """Where one benchmark's results for one model live: named by the weights evaluated and the eval
    settings, never by a folder name that a differently trained model could reuse."""
    from evr1.eval import get_benchmark

    key = f"{model.content_hash or short_hash(model.uri)}-{cfg.fingerprint('eval', 'cache')[:8]}"
    return run_paths(cfg)["eval"] / key / get_benchmark(benchmark).name


def failed_items(results: Path) -> int:
    """How many failure records a results file holds, old ones included (0 when there is no file).

    Counting every failure ever appended (not only the newest per item) keeps the key moving forward:
    after a retry succeeds the count stays where it was, so the retry's result is the one served
    from the cache, never the earlier result that still had the failure.
    """
    if not results.is_file():
        return 0
    failed = 0
    for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line: that item runs again anyway
        failed += isinstance(rec, dict) and "error" in rec
    return failed
