"""The stages as plain functions: config in, `StageResult` out, every stage tracked as a nested MLflow run.

`tasks/` wraps each in a Prefect task and `flows/` chains them, but nothing here knows about
Prefect: `evr1 ingest|cache|train|merge|eval` call these functions directly.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

from evr1.config import Config, flat_params
from evr1.results import StageResult
from evr1.tracking import Tracker, default_tracking_uri

PARENT_RUN_FILE = "mlflow_parent_run_id"


# -- run folder and tracking ----------------------------------------------------------------------

def run_paths(cfg: Config) -> dict[str, Path]:
    root = cfg.run_dir()
    return {"root": root, "data": root / "data", "lance": root / "lance", "models": root / "models",
            "checkpoints": root / "checkpoints", "merged": root / "merged", "eval": root / "eval"}


def run_token(cfg: Config) -> str:
    """A random id written once into the run folder: it changes when the folder is deleted and rebuilt.

    Part of every stage's Prefect cache key, so a cached result can never point at a run folder
    that no longer holds what the stage wrote.
    """
    root = run_paths(cfg)["root"]
    marker = root / ".evr1-run-token"
    if not marker.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".evr1-run-token.{uuid.uuid4().hex}"
        tmp.write_text(uuid.uuid4().hex)
        try:
            os.link(tmp, marker)  # atomic create-if-absent: concurrent first calls agree on one token
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return marker.read_text().strip()


def tracker(cfg: Config) -> Tracker:
    """The run's tracker, attached to its parent MLflow run (created on first use, reused on resume)."""
    t = cfg.tracking
    if not t.enabled:
        return Tracker.disabled()
    root = run_paths(cfg)["root"]
    uri = t.uri or default_tracking_uri(root)
    tr = Tracker(uri, t.experiment, artifact_root=root / "mlartifacts")
    marker = root / PARENT_RUN_FILE
    if marker.exists():
        tr.parent_run_id = marker.read_text().strip()
    else:
        tr.start_parent(cfg.run.name, params=flat_params(cfg), tags={"evr1.run_dir": str(root)})
        marker.write_text(tr.parent_run_id or "")
    return tr


def _hash(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- stages ---------------------------------------------------------------------------------------

def stage_ingest(cfg: Config) -> StageResult:
    """Synthesise data if asked, then validate every record into Lance `samples` (+ `rejects`)."""
    from evr1 import rewards
    from evr1.data.ingest import ingest
    from evr1.data.synth import make_synthetic

    for ref in cfg.reward.families:  # user families register their problem types before validation
        rewards.load_reward_function(ref)
    p = run_paths(cfg)
    d = cfg.data
    train_files, eval_files, root = list(d.train_files), list(d.eval_files), d.data_root
    tr = tracker(cfg)
    with tr.stage("ingest"):
        if d.synth is not None:
            s = d.synth
            rep = make_synthetic(p["data"] / "synth", s.n, seed=s.seed, heldout=s.heldout,
                                 image_fraction=s.image_fraction, size=tuple(s.size), fps=s.fps, seconds=s.seconds)
            train_files, eval_files, root = [str(rep.train_path)], [str(rep.heldout_path)], str(p["data"] / "synth")
        samples_uri, rejects_uri = str(p["lance"] / "samples"), str(p["lance"] / "rejects")
        reports = []
        for split, files, mode in (("train", train_files, "overwrite"), ("heldout", eval_files, "append")):
            if not files:
                continue
            reports.append(ingest(files, samples_uri, rejects_uri, split=split, data_root=root,
                                  resolve_problem_type=rewards.resolve, check_media_exists=d.check_media_exists,
                                  mode=mode))
        read = sum(r.read for r in reports)
        accepted = sum(r.accepted for r in reports)
        rejected = sum(r.rejected for r in reports)
        metrics = {"read": read, "accepted": accepted, "rejected": rejected,
                   **{f"accepted_{r_split}": r.accepted for r_split, r in zip(("train", "heldout"), reports)}}
        tr.log_metrics(metrics)
        tr.log_dict({"reports": [r.model_dump(mode="json") for r in reports]}, "ingest_report.json")
    return StageResult(stage="ingest", uri=samples_uri, version=reports[-1].samples_version,
                       content_hash=_hash([r.content_hash for r in reports]), metrics=metrics,
                       extra={"rejects_uri": rejects_uri, "data_root": root or ""})


def stage_model(cfg: Config) -> StageResult:
    """The starting model: `model.path`, or a tiny random-weight model built offline into the run folder."""
    from evr1.models import make_tiny

    if cfg.model.path:
        return StageResult(stage="model", uri=cfg.model.path, content_hash=_hash(cfg.model.path))
    tiny = cfg.model.tiny
    out = run_paths(cfg)["models"] / f"tiny-{tiny.family}-seed{tiny.seed}"
    if not (out / "config.json").exists():
        make_tiny(tiny.family, out, seed=tiny.seed)
    return StageResult(stage="model", uri=str(out), content_hash=_hash(tiny.family, tiny.seed))


def _media_items(samples: list[dict]) -> list[tuple[str, str, str]]:
    return [(s["sample_id"], path, kind) for s in samples for kind, key in (("video", "videos"), ("image", "images"))
            for path in (s.get(key) or [])]


def stage_cache(cfg: Config, samples: StageResult, model: StageResult) -> StageResult:
    """Decode every sample's media once into the Lance `frames` table (hits are skipped)."""
    from evr1.cache import build_frame_cache
    from evr1.data.ingest import read_samples
    from evr1.models import family_of

    p = run_paths(cfg)
    frames_uri = cfg.cache.uri or str(p["lance"] / "frames")
    if not cfg.cache.enabled:
        return StageResult(stage="cache", uri="", metrics={"enabled": 0})
    params = cfg.cache.frame_params(family_of(model.uri).factor)
    rows = read_samples(samples.uri)
    tr = tracker(cfg)
    with tr.stage("cache", params={f"cache.{k}": v for k, v in params.__dict__.items()}):
        rep = build_frame_cache(_media_items(rows), frames_uri, params, data_root=samples.extra.get("data_root") or None,
                                workers=cfg.cache.workers, ray_address=cfg.orchestration.ray_address,
                                timeout_s=cfg.cache.timeout_s, rejects_uri=str(p["lance"] / "cache_rejects"),
                                progress=False)
        metrics = {"requested": rep.requested, "unique": rep.unique, "hits": rep.hits, "decoded": rep.decoded,
                   "failed": rep.failed, "seconds": rep.seconds}
        tr.log_metrics(metrics)
    return StageResult(stage="cache", uri=frames_uri, version=rep.version,
                       content_hash=_hash(samples.content_hash, params.__dict__), metrics=metrics)


def stage_train(cfg: Config, samples: StageResult, frames: StageResult, model: StageResult) -> StageResult:
    """GRPO on Ray; the checkpoint lands under <run>/checkpoints."""
    from evr1.data.ingest import read_samples
    from evr1.train.trainer import train

    p = run_paths(cfg)
    rows = read_samples(samples.uri, split="train")
    val_rows = read_samples(samples.uri, split="heldout") if cfg.trainer.val_every else None
    tr = tracker(cfg)
    with tr.stage("train", params={"samples": len(rows)}):
        result = train(cfg, samples=rows, frames_uri=frames.uri or None, model_dir=Path(model.uri),
                       out_dir=p["checkpoints"], log_metrics=lambda m, s: tr.log_metrics(m, step=s),
                       val_samples=val_rows)
        tr.log_dict({"history": result.history}, "train_history.json")
    final = result.final_metrics
    headline = {k: final[k] for k in ("reward/overall", "reward/accuracy", "reward/format", "actor/pg_loss",
                                       "actor/kl_loss", "actor/entropy") if k in final}
    return StageResult(stage="train", uri=str(result.checkpoint), version=result.steps,
                       content_hash=_hash(cfg.fingerprint("algorithm", "trainer", "rollout", "reward", "run"),
                                          samples.content_hash, frames.content_hash, model.content_hash),
                       metrics=headline)


def stage_merge(cfg: Config, checkpoint: StageResult, model: StageResult) -> StageResult:
    """Checkpoint → Hugging Face directory, verified against the trained logits, registered in MLflow."""
    from evr1.merge import merge_checkpoint

    out = run_paths(cfg)["merged"] / Path(checkpoint.uri).name
    tr = tracker(cfg)
    with tr.stage("merge"):
        res = merge_checkpoint(Path(checkpoint.uri), out, base_model=Path(model.uri))
        metrics = {"num_parameters": float(res.num_parameters)}
        if res.max_logit_diff is not None:
            metrics["max_logit_diff"] = res.max_logit_diff
        tr.log_metrics(metrics)
        version = tr.register_model_dir(out, cfg.tracking.register_model) if cfg.tracking.register_model else None
    return StageResult(stage="merge", uri=str(out), version=int(version) if version else None,
                       content_hash=res.weights_sha256, metrics=metrics)


def stage_eval(cfg: Config, model: StageResult, samples: StageResult, frames: StageResult,
               benchmark: str = "heldout") -> StageResult:
    """Evaluate a model directory on a benchmark; per-item results are resumable by item id."""
    from evr1.eval import get_benchmark
    from evr1.eval.evaluate import evaluate

    from evr1 import rewards

    for ref in cfg.reward.families:
        rewards.load_reward_function(ref)
    bench = get_benchmark(benchmark)
    items = bench.load(samples.uri)
    out = run_paths(cfg)["eval"] / (Path(model.uri).name or "model")
    tr = tracker(cfg)
    with tr.stage(f"eval-{benchmark}"):
        summary = evaluate(cfg, bench, items, model_dir=Path(model.uri), frames_uri=frames.uri or None, out_dir=out)
        tr.log_metrics(summary.metrics())
        tr.log_artifact(out / bench.name / "table.md", "eval")
        tr.log_artifact(out / bench.name / "results.jsonl", "eval")
    return StageResult(stage="eval", uri=str(out / bench.name), content_hash=model.content_hash,
                       metrics=summary.metrics(), extra={"table": str(out / bench.name / "table.md")})
