"""The stages as plain functions: config in, `StageResult` out, every stage tracked as a nested MLflow run.

`tasks/` wraps each in a Prefect task and `flows/` chains them, but nothing here knows about
Prefect: `evr1 ingest|cache|train|merge|eval` call these functions directly. Each stage imports
what it runs inside its body: `lineage.code_version` reads those imports to key the stage's cache
by the code it runs, and a flow that only evaluates never loads the trainer.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from evr1.cache.store import STORE_FORMAT
from evr1.config import Config, flat_params
from evr1.pipeline import lineage
from evr1.pipeline.keys import eval_dir, file_stats, short_hash, training_fingerprint
from evr1.pipeline.results import StageResult
from evr1.pipeline.runs import log_table_input, previous_train_run, remember_train_run, run_paths, tag_stage, tracker
from evr1.tracking import Tracker, default_tracking_uri, progress


def stage_ingest(cfg: Config, *, run_key: str | None = None) -> StageResult:
    """Synthesise data if asked, then validate every record into Lance `samples` (+ `rejects`)."""
    from evr1 import rewards
    from evr1.data.ingest import ingest
    from evr1.models.prompt_length import limit_for_config
    from evr1.data.synth import make_synthetic

    for ref in cfg.reward.families:  # user families register their problem types before validation
        rewards.load_reward_function(ref)
    p = run_paths(cfg)
    d = cfg.data
    train_files, eval_files, test_files, root = list(d.train_files), list(d.eval_files), list(d.test_files), d.data_root
    tr = tracker(cfg, run_key)
    with tr.stage("ingest"):
        if d.synth is not None:
            s = d.synth
            rep = make_synthetic(p["data"] / "synth", s.n, seed=s.seed, heldout=s.heldout,
                                 image_fraction=s.image_fraction, size=tuple(s.size), fps=s.fps, seconds=s.seconds, kinds=s.kinds or None,
                                 test=s.test)
            train_files, eval_files, root = [str(rep.train_path)], [str(rep.heldout_path)], str(p["data"] / "synth")
            test_files = [str(rep.test_path)] if rep.test_path else []
        samples_uri, rejects_uri = str(p["lance"] / "samples"), str(p["lance"] / "rejects")
        prompt_limit = limit_for_config(cfg)  # over-long records are rejected with their length
        reports = []
        # The test split is ingested (and cached) with the others; training and validation never read it.
        for split, files, mode in (("train", train_files, "overwrite"), ("heldout", eval_files, "append"),
                                   ("test", test_files, "append")):
            if not files:
                continue
            reports.append(ingest(files, samples_uri, rejects_uri, split=split, data_root=root,
                                  resolve_problem_type=rewards.resolve, check_media_exists=d.check_media_exists,
                                  mode=mode, prompt_limit=prompt_limit, offline_key=d.offline_key,
                                  allow_unjudgeable_tests=cfg.reward.allow_unjudgeable_tests))
        read = sum(r.read for r in reports)
        accepted = sum(r.accepted for r in reports)
        rejected = sum(r.rejected for r in reports)
        metrics = {"read": read, "accepted": accepted, "rejected": rejected,
                   **{f"accepted_{r.split}": r.accepted for r in reports}}
        tr.log_metrics(metrics)
        tr.log_dict({"reports": [r.model_dump(mode="json") for r in reports]}, "ingest_report.json")
        tag_stage(tr, cfg, "ingest", in_files=",".join(map(str, train_files + eval_files + test_files))[:5000],
                 out_samples_uri=samples_uri, out_samples_version=reports[-1].samples_version if reports else None,
                 out_rejects_uri=rejects_uri)
    return StageResult(stage="ingest", uri=samples_uri, version=reports[-1].samples_version,
                       content_hash=short_hash([r.content_hash for r in reports]), metrics=metrics,
                       extra={"rejects_uri": rejects_uri, "data_root": root or ""})


def stage_model(cfg: Config, *, run_key: str | None = None) -> StageResult:
    """The starting model: `model.path`, or a tiny random-weight model built offline into the run folder."""
    from evr1.models import make_tiny

    if cfg.model.path:
        return StageResult(stage="model", uri=cfg.model.path, content_hash=short_hash(cfg.model.path, file_stats(cfg.model.path)))
    tiny = cfg.model.tiny
    shape = [*sorted(tiny.sizes.items()), *([("init", tiny.init)] if tiny.init != "default" else [])]
    suffix = f"-{short_hash(shape)[:8]}" if shape else ""
    out = run_paths(cfg)["models"] / f"tiny-{tiny.family}-seed{tiny.seed}{suffix}"
    if not (out / "config.json").exists():
        make_tiny(tiny.family, out, seed=tiny.seed, init=tiny.init, **tiny.sizes)
    return StageResult(stage="model", uri=str(out), content_hash=short_hash(tiny.family, tiny.seed, *shape))


def _media_items(samples: list[dict]) -> list[tuple[str, str, str]]:
    return [(s["sample_id"], path, kind) for s in samples for kind, key in (("video", "videos"), ("image", "images"))
            for path in (s.get(key) or [])]


def stage_cache(cfg: Config, samples: StageResult, model: StageResult, *, run_key: str | None = None) -> StageResult:
    """Decode every sample's media once into the Lance `frames` table (hits are skipped)."""
    from evr1.cache import build_frame_cache
    from evr1.data.ingest import read_samples
    from evr1.models import family_of

    p = run_paths(cfg)
    frames_uri = run_frames_uri(cfg)
    if not cfg.cache.enabled:
        return StageResult(stage="cache", uri="", metrics={"enabled": 0})
    params = cfg.cache.frame_params(family_of(model.uri).factor)
    rows = read_samples(samples.uri)
    tr = tracker(cfg, run_key)
    with tr.stage("cache", params={f"cache.{k}": v for k, v in params.__dict__.items()}):
        # The sinks (Prefect's progress artifact, `evr1 run`'s status) see the stage start and end; the
        # builder draws the terminal bar itself.
        started = progress.track("cache", 1, "build", bar=False)
        if cfg.cache.workers > 0:  # the decoders' Ray is the one `train` uses next: started once, not twice
            _start_ray(cfg, "cache")
        rep = build_frame_cache(_media_items(rows), frames_uri, params, data_root=samples.extra.get("data_root") or None,
                                workers=cfg.cache.workers, ray_address=cfg.orchestration.ray_address,
                                timeout_s=cfg.cache.timeout_s, rejects_uri=str(p["lance"] / "cache_rejects"),
                                progress=progress.terminal(), retry_failed=cfg.cache.retry_failed)
        started.close(1)
        tag_stage(tr, cfg, "cache", in_samples_uri=samples.uri, in_samples_version=samples.version,
                 out_frames_uri=frames_uri, out_frames_version=rep.version)
        log_table_input(tr, samples.uri, samples.version, "samples", "cache")
        metrics = {"requested": rep.requested, "unique": rep.unique, "hits": rep.hits, "decoded": rep.decoded,
                   "failed": rep.failed, "remembered": rep.remembered, "seconds": rep.seconds}
        tr.log_metrics(metrics)
        # Samples whose media cannot be decoded: training and eval leave them out (and say so)
        # instead of failing on them mid-run. The reasons are in the cache_rejects table.
        undecodable = sorted({r["record_id"] for r in rep.rejects})
        content_hash = short_hash(samples.content_hash, params.__dict__, undecodable)
        excluded = p["lance"] / f"cache_undecodable-{content_hash}.json"  # immutable once written
        excluded.write_text(json.dumps(undecodable))
        if undecodable:
            tr.log_dict({"record_ids": undecodable, "rejects": rep.rejects}, "cache_rejects.json")
    return StageResult(stage="cache", uri=frames_uri, version=rep.version, content_hash=content_hash,
                       metrics=metrics, extra={"undecodable": str(excluded)})


def run_frames_uri(cfg: Config) -> str:
    """The run's frame cache: `cache.uri`, else a table in the run folder named by the store format,
    so a run folder from an older release gets a new table instead of a refusal (a user-set
    cache.uri in an old format is refused, naming it)."""
    return cfg.cache.uri or str(run_paths(cfg)["lance"] / f"frames-v{STORE_FORMAT}")


def eval_frames_uri(cfg: Config) -> str:
    """Where the benchmarks' frames are cached: `eval.frames_uri`, else `<run>/lance/eval_frames-v<store format>`."""
    return cfg.eval.frames_uri or str(run_paths(cfg)["lance"] / f"eval_frames-v{STORE_FORMAT}")


def stage_cache_benchmarks(cfg: Config, model: StageResult, benchmarks: list[str] | None = None) -> StageResult:
    """Decode the videos (and images) of `eval.benchmarks` once into a Lance frames table, with the
    model family's rules, so evaluation reads frames instead of decoding them (`evr1 cache --benchmarks`).
    Each benchmark's paths are confined to its video root; failures go to `eval_cache_rejects`."""
    from evr1.cache import build_frame_cache
    from evr1.eval import PromptContext, get_benchmark
    from evr1.eval.evaluate import load_items, video_root
    from evr1.models import family_of

    params = cfg.cache.frame_params(family_of(model.uri).factor)
    uri = eval_frames_uri(cfg)
    totals = {"requested": 0, "unique": 0, "hits": 0, "decoded": 0, "failed": 0, "seconds": 0.0}
    version = None
    for name in benchmarks or cfg.eval.benchmarks:
        bench = get_benchmark(name)
        if bench.extra.get("single_profile"):
            continue  # the held-out split is cached by the cache stage with the training data
        ctx = PromptContext(profile=cfg.eval.profile)
        media = []
        for item in load_items(cfg, bench):
            asked = bench.prompted(item, ctx)
            # A clip cut by time is decoded when asked for: the cache holds whole-video samples.
            media += [(f"{bench.name}/{item['id']}", v, "video") for v, seg in
                      zip(asked.videos, list(asked.segments) or [None] * len(asked.videos)) if seg is None]
            media += [(f"{bench.name}/{item['id']}", i, "image") for i in asked.images]
        rep = build_frame_cache(media, uri, params, data_root=video_root(cfg, bench), workers=cfg.cache.workers,
                                ray_address=cfg.orchestration.ray_address, timeout_s=cfg.cache.timeout_s,
                                rejects_uri=str(run_paths(cfg)["lance"] / "eval_cache_rejects"),
                                progress=sys.stderr.isatty(), retry_failed=cfg.cache.retry_failed)
        for key in totals:
            totals[key] += getattr(rep, key)
        version = rep.version if rep.version is not None else version
    return StageResult(stage="cache", uri=uri, version=version, content_hash=short_hash(uri, version, params.__dict__),
                       metrics=totals)


def stage_train(cfg: Config, samples: StageResult, frames: StageResult, model: StageResult, *,
                run_key: str | None = None,
                on_table: Callable[[str, list[dict]], None] | None = None) -> StageResult:
    """GRPO on Ray; the checkpoint lands under <run>/checkpoints.

    The readable rollout and validation tables go to MLflow and to `on_table(artifact_file, rows)`
    (the Prefect task makes table artifacts of them)."""
    from evr1.data.ingest import read_samples
    from evr1.rewards.sandbox import allow_unjudgeable_tests, allow_unsandboxed
    from evr1.train.trainer import starting_point, train

    allow_unsandboxed(cfg.reward.allow_unsandboxed_code)  # code rewards: refuse without bubblewrap unless set
    allow_unjudgeable_tests(cfg.reward.allow_unjudgeable_tests)  # and tests a policy could forge a pass for
    p = run_paths(cfg)
    fingerprint = training_fingerprint(cfg, samples, frames, model)
    listed = frames.extra.get("undecodable")
    undecodable = set(json.loads(Path(listed).read_text())) if listed else set()
    rows = [r for r in read_samples(samples.uri, split="train") if r["sample_id"] not in undecodable]
    if not rows:
        raise ValueError(f"training has no samples: the {len(undecodable)} samples of split 'train' in {samples.uri} all "
                         f"have media the frame cache rejected (reasons in {p['lance'] / 'cache_rejects'})")
    val_rows = read_samples(samples.uri, split="heldout") if cfg.trainer.val_every else None
    tr = tracker(cfg, run_key)
    out_dir = p["checkpoints"] / fingerprint
    continued = previous_train_run(out_dir, tr) if cfg.trainer.resume else None
    # The config on the run that holds the curves, so MLflow's Compare shows both on one kind of run.
    with tr.stage("train", params={"samples": len(rows), "excluded_undecodable": len(undecodable), **flat_params(cfg)},
                  run_id=continued):
        remember_train_run(out_dir, tr)
        forked = starting_point(cfg, out_dir)[1]
        if forked is not None:  # tagged now: a fork killed before its first save still names its origin
            tag_stage(tr, cfg, "train", in_forked_from=forked)
        if continued and tr.enabled and tr.parent_run_id:
            # This flow run continues an earlier one's training: its parent links to the run with the curve.
            tr.client.set_tag(tr.parent_run_id, "evr1.continues_train_run", continued)
        done = tr.logged_steps()  # a continued run: what the killed command logged is not logged twice
        bars = progress.TrainingProgress(cfg.trainer.warmup_sft_steps, cfg.trainer.steps)
        warmup: list[dict] = []  # the warm-up's rows (not in the training history), for the plot

        def log_metrics(m: dict, s: int) -> None:
            tr.log_metrics({k: v for k, v in m.items() if s > done.get(k, -1)}, step=s)  # step 0: validation before RL
            bars(m, s)
            if any(k.startswith("warmup/") for k in m):
                warmup.append({"step": s, **m})

        def log_table(name: str, table: list[dict]) -> None:
            if not table or table[0]["step"] <= done.get("reward/overall", 0):  # logged at every RL step
                return  # logged by the killed run this one continues (MLflow would append the rows again)
            tr.log_table(table, name)
            if on_table is not None:
                on_table(name, table)

        log_table_input(tr, samples.uri, samples.version, "samples", "training")
        log_table_input(tr, frames.uri, frames.version, "frames", "training")
        _start_ray(cfg)
        # Until the first metrics (a bar then takes over): the ranks load the model, the rollout engine
        # starts, the first weight sync; then the first warm-up step, the validation or the first step.
        progress.lead_in("train: starting the actors (each rank loads the model, the rollout engine, weight sync)")
        try:
            result = train(cfg, samples=rows, frames_uri=frames.uri or None, model_dir=Path(model.uri),
                           out_dir=out_dir, val_samples=val_rows, log_metrics=log_metrics, log_table=log_table)
        finally:
            bars.close(ok=sys.exc_info()[0] is None)
        tr.log_dict({"history": result.history}, "train_history.json")
        tag_stage(tr, cfg, "train", in_samples_uri=samples.uri, in_samples_version=samples.version,
                 in_frames_uri=frames.uri, in_frames_version=frames.version, in_model=model.uri,
                 out_checkpoint=result.checkpoint, out_step=result.steps)
        _plot_training(tr, result.history, before_rl=result.before_rl or tr.logged_at_step(0, "val/"),
                       warmup=warmup, chance_rows=val_rows[: cfg.trainer.val_limit] if val_rows else rows)
    final = result.final_metrics
    headline = {k: final[k] for k in ("reward/overall", "reward/accuracy", "reward/format", "actor/pg_loss",
                                       "actor/kl_loss", "actor/entropy") if k in final}
    tr.log_parent_metrics({f"train/{k}": v for k, v in headline.items() if k.startswith("reward/")})
    return StageResult(stage="train", uri=str(result.checkpoint), version=result.steps,
                       content_hash=short_hash(fingerprint, result.steps), metrics=headline,
                       extra={"fingerprint": fingerprint,
                              **({"forked_from": str(result.forked_from)} if result.forked_from else {}),
                              **({"note": f"resumed at step {result.resumed_from}" if result.resumed_from < result.steps
                                  else f"nothing to do: the checkpoint is at step {result.steps}"}
                                 if result.resumed_from else {})})


def stage_merge(cfg: Config, checkpoint: StageResult, model: StageResult, *,
                run_key: str | None = None) -> StageResult:
    """Checkpoint → Hugging Face directory, verified against the trained logits, registered in MLflow."""
    from evr1.train.merge import merge_checkpoint

    out = run_paths(cfg)["merged"] / f"{checkpoint.extra.get('fingerprint', 'run')}-{Path(checkpoint.uri).name}"
    tr = tracker(cfg, run_key)
    with tr.stage("merge"), progress.tracked("merge", 2, "steps") as bar:
        res = merge_checkpoint(Path(checkpoint.uri), out, base_model=Path(model.uri), dtype=cfg.model.dtype)
        bar.update(1)
        metrics = {"num_parameters": float(res.num_parameters)}
        if res.max_logit_diff is not None:
            metrics["max_logit_diff"] = res.max_logit_diff
        if res.weights_verified is not None:
            metrics["weights_verified"] = float(res.weights_verified)
        tr.log_metrics(metrics)
        name = cfg.tracking.register_model
        description = (f"GRPO-trained from {model.uri} on {checkpoint.extra.get('fingerprint', '?')} "
                       f"(step {checkpoint.version}), run {cfg.run.name}, evr1 {lineage.git_commit() or 'unknown commit'}; "
                       f"merged to a Hugging Face directory (safetensors).")
        version = tr.register_model_dir(out, name, weights_sha256=res.weights_sha256,
                                        description=description) if name else None
        tag_stage(tr, cfg, "merge", in_checkpoint=checkpoint.uri, in_step=checkpoint.version,
                 out_model_dir=out, out_model_uri=f"models:/{name}/{version}" if version else None,
                 out_registered_model=name or None, out_registered_version=version,
                 out_weights_sha256=res.weights_sha256)
    return StageResult(stage="merge", uri=str(out), version=int(version) if version else None,
                       content_hash=res.weights_sha256, metrics=metrics)


def stage_registered_model(cfg: Config, name: str | None = None) -> StageResult:
    """The newest registered version of the model `name` (default `tracking.register_model`) in the
    tracking server's registry, as a model directory (downloaded when not on this machine)."""
    from evr1.tracking import latest_model_version

    name = name or cfg.tracking.register_model
    if not name:
        raise ValueError("no model name: pass one or set tracking.register_model")
    uri = cfg.tracking.uri or default_tracking_uri(cfg.run_dir())
    found = latest_model_version(uri, name)
    if found is None:
        raise LookupError(f"no registered version of model {name!r} in {uri}")
    version, model_dir = found
    # A registered version never changes, and a downloaded copy lands somewhere new each time: the
    # version itself names the weights (so a night without a new version reuses the results).
    return StageResult(stage="model", uri=str(model_dir), version=int(version),
                       content_hash=short_hash(uri, name, version), extra={"name": name})


def stage_eval(cfg: Config, model: StageResult, samples: StageResult, frames: StageResult,
               benchmark: str = "heldout", *, run_key: str | None = None) -> StageResult:
    """Evaluate a model directory on one benchmark; per-item results are resumable by item id."""
    return stage_eval_suite(cfg, model, samples, frames, [benchmark], run_key=run_key)[0]


def stage_eval_suite(cfg: Config, model: StageResult, samples: StageResult, frames: StageResult,
                     benchmarks: list[str], *, run_key: str | None = None) -> list[StageResult]:
    """Evaluate a model directory on several benchmarks through ONE engine (loaded once, fed from one
    queue); a result per benchmark, in order, each with its own files and its own MLflow stage."""
    from evr1.eval import get_benchmark
    from evr1.eval.evaluate import evaluate_suite, load_items

    from evr1 import rewards

    rewards.sandbox.allow_unsandboxed(cfg.reward.allow_unsandboxed_code)
    rewards.sandbox.allow_unjudgeable_tests(cfg.reward.allow_unjudgeable_tests)
    for ref in cfg.reward.families:
        rewards.load_reward_function(ref)
    benches = [get_benchmark(name) for name in benchmarks]
    # The benchmarks' own cache (`evr1 cache --benchmarks`) when built; the run's cache for its held-out split.
    own = eval_frames_uri(cfg)

    def frames_for(bench) -> str | None:
        has_own = cfg.eval.frames_uri is not None or (Path(own).exists() and not bench.extra.get("single_profile"))
        return own if has_own else (frames.uri or None)

    suite = [(bench, load_items(cfg, bench, samples.uri), frames_for(bench)) for bench in benches]
    out = eval_dir(cfg, model, benches[0].name).parent  # one folder per (model, eval settings)
    tr = tracker(cfg, run_key)
    # One benchmark: its MLflow stage wraps the run, so a failure closes it FAILED. A suite: each
    # benchmark's stage gets its metrics and files once the shared run is over.
    alone = tr.stage(f"eval-{benches[0].name}") if len(benches) == 1 else contextlib.nullcontext()
    results = []
    bar = progress.EvalProgress(sum(len(items if cfg.eval.limit is None else items[: cfg.eval.limit])
                                    for _, items, _ in suite))
    with alone:
        try:
            summaries = evaluate_suite(cfg, suite, model_dir=Path(model.uri), out_dir=out, on_result=bar)
        finally:
            bar.close(ok=sys.exc_info()[0] is None)
        for bench in benches:
            summary = summaries[bench.name]
            with tr.stage(f"eval-{bench.name}") if len(benches) > 1 else contextlib.nullcontext():
                tr.log_metrics(summary.metrics())
                tag_stage(tr, cfg, "eval", in_model=model.uri, in_model_version=model.version,
                         in_frames_uri=frames_for(bench), out_results=out / bench.name)
                if bench.extra.get("single_profile"):  # the held-out split of the run's own samples
                    log_table_input(tr, samples.uri, samples.version, "samples", "evaluation")
                for name in ("table.md", "summary.json", "results.jsonl"):
                    tr.log_artifact(out / bench.name / name, "eval")
                results.append(StageResult(stage="eval", uri=str(out / bench.name), content_hash=model.content_hash,
                                       metrics=summary.metrics(), extra={"table": str(out / bench.name / "table.md"),
                                                                         "summary": str(out / bench.name / "summary.json")}))
        scores = {b.name: summaries[b.name].score for b in benches}
        _plot_scores(tr, scores)
        tr.log_parent_metrics({f"eval/{k}": v for k, v in scores.items()})
        name = model.extra.get("name") or cfg.tracking.register_model
        if name and model.version is not None and model.stage in ("merge", "model"):  # a registered version
            tr.score_model_version(name, model.version, scores)
    return results


def _start_ray(cfg: Config, stage: str = "train") -> None:
    """Ray started (or joined) as `train` would, under a status line of its own: the time it takes is
    then seen apart from the actors' (train's own call finds it running). The cache stage starts it
    with room for its decoders (`cache.workers` CPUs at least) and leaves it running for `train`:
    one start of 3-6 s instead of two. A stage that finds it running shows no line."""
    import ray

    from evr1.cluster.connect import ensure_ray

    if ray.is_initialized():
        return
    o = cfg.orchestration
    num_cpus = o.ray_num_cpus
    if stage == "cache" and num_cpus is not None:
        num_cpus = max(num_cpus, cfg.cache.workers)
    with progress.phase(f"{stage}: starting Ray" if not o.ray_address else f"{stage}: joining Ray at {o.ray_address}"):
        ensure_ray(o.ray_address, num_cpus=num_cpus, object_store_mb=o.ray_object_store_mb)


def _plot_training(tr: Tracker, history: list[dict], *, before_rl: dict | None = None,
                   warmup: list[dict] | None = None, chance_rows: list[dict] | None = None) -> None:
    """Training curves (reward, training and validation accuracy against the before-RL baseline and
    chance, KL, entropy, length vs step; the warm-up's loss) as a PNG of the open stage run. Chance:
    guessing an option of each multiple-choice sample of `chance_rows` (the validated ones)."""
    if not tr.enabled or not history:
        return
    from evr1.tracking.plots import chance_accuracy, training_curves

    out = Path(tempfile.mkdtemp(prefix="evr1-plots-")) / "training_curves.png"
    if training_curves(history, out, before_rl=before_rl, warmup=warmup, chance=chance_accuracy(chance_rows or [])):
        tr.log_artifact(out, "plots")


def _plot_scores(tr: Tracker, scores: dict[str, float]) -> None:
    """Per-benchmark scores as bars, a PNG of the parent run (and of the newest eval stage run)."""
    if not tr.enabled or not scores or tr.parent_run_id is None:
        return
    from evr1.tracking.plots import benchmark_bars

    out = Path(tempfile.mkdtemp(prefix="evr1-plots-")) / "benchmark_scores.png"
    benchmark_bars(scores, out)
    tr.client.log_artifact(tr.parent_run_id, str(out), "plots")
