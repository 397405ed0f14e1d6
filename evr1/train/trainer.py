"""The GRPO-family training loop on Ray: rollout → reward → advantages → FSDP2 update → weight sync.

The driver (this module) owns the run: resume, warm-up, validation, checkpoints and the
asynchronous producer; one step's sequence is `grpo_step.py`; Ray actors own the models. One
call to `train()` is one long stage: Prefect sees its start, end and result, MLflow sees every step.
"""

from __future__ import annotations

import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from evr1 import rewards, rl
from evr1.cluster.connect import ensure_ray
from evr1.config import Config
from evr1.data.ingest import reward_sample
from evr1.models import load_adapter
from evr1.models.prompt_length import effective_limit, model_positions
from evr1.train import checkpoint as ckpt_io
from evr1.train import prompt_source, warmup
from evr1.train.actor_group import ActorGroup
from evr1.train.async_rollouts import RolloutProducer
from evr1.train.breakdown import accuracy_by_family
from evr1.train.collect import draw_readable, sampling
from evr1.train.entropy_bonus import EntropyControl
from evr1.train.grpo_step import one_step, produce
from evr1.train.prompt_source import PromptSource
from evr1.train.protocol import ReaderSpec, data_parallel, make_shards
from evr1.train.rollout_table import RolloutTables, TableSink


@dataclass
class TrainResult:
    checkpoint: Path
    steps: int
    history: list[dict] = field(default_factory=list)
    before_rl: dict[str, float] = field(default_factory=dict)  # validation after the warm-up, before step 1
    resumed_from: int = 0  # the checkpoint step this training continued from (0: it started fresh)
    forked_from: Path | None = None  # another run's checkpoint it started from (`trainer.init_from`)

    @property
    def final_metrics(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}


def _scorer(cfg: Config) -> Callable[[list[str], list[dict]], tuple[list[dict], dict]]:
    r = cfg.reward
    rewards.sandbox.allow_unsandboxed(r.allow_unsandboxed_code)  # code rewards refuse without isolation unless set
    rewards.sandbox.allow_unjudgeable_tests(r.allow_unjudgeable_tests)
    for ref in r.families:
        rewards.load_reward_function(ref)

    def score(texts, samples):
        out = rewards.compute_scores(texts, samples, workers=r.workers, timeout=r.timeout_s,
                                     accuracy_weight=r.accuracy_weight, format_weight=r.format_weight,
                                     shaping=r.shaping())
        return out.scores, out.metrics
    return score


def starting_point(cfg: Config, out_dir: Path) -> tuple[Path | None, Path | None]:
    """(the run's own newest checkpoint, the checkpoint a fork starts from): a fork
    (`trainer.init_from`) starts where another run's checkpoint stands, until it has one of its own.
    Without `trainer.resume` the run's own checkpoints do not count (`train` clears them)."""
    own = ckpt_io.latest_checkpoint(out_dir) if cfg.trainer.resume else None
    init = cfg.trainer.init_from
    return own, (ckpt_io.resolve(Path(init)) if init and own is None else None)


def train(cfg: Config, *, samples: list[dict], frames_uri: str | None, model_dir: Path, out_dir: Path,
          log_metrics: Callable[[dict, int], None] = lambda m, s: None,
          val_samples: list[dict] | None = None, log_table: TableSink | None = None) -> TrainResult:
    """Run `cfg.trainer.steps` GRPO steps from `model_dir`; resume from `out_dir` when it holds a checkpoint.

    `log_table(artifact_file, rows)` receives the readable rollout and validation tables (evr1/train/rollout_table.py)."""
    t = cfg.trainer
    out_dir.mkdir(parents=True, exist_ok=True)
    if not t.resume:
        ckpt_io.clear(out_dir)  # asked not to resume: an older run's checkpoints must not mix with this one's
    own, forked = starting_point(cfg, out_dir)
    resume_from = own or forked
    state = ckpt_io.read_state(resume_from) if resume_from else {"step": 0, "cursor": {}, "history": []}
    if forked is not None and state["step"] >= t.steps:
        raise ValueError(f"trainer.init_from={t.init_from}: that checkpoint is at step {state['step']}, "
                         f"trainer.steps={t.steps}: nothing to train (raise trainer.steps)")
    ensure_ray(cfg.orchestration.ray_address, num_cpus=cfg.orchestration.ray_num_cpus,
               object_store_mb=cfg.orchestration.ray_object_store_mb)
    adapter = load_adapter(model_dir)
    params = cfg.cache.frame_params(adapter.family.factor)
    mode = cfg.cache.mode if (cfg.cache.enabled and frames_uri) else "decode-only"
    # Workers open their own readers from this spec: the driver never touches a frame.
    spec = ReaderSpec(frames_uri if mode != "decode-only" else None, params, mode,
                      str(cfg.data.data_root) if cfg.data.data_root else None, cfg.rollout.template, cfg.rollout.thinking,
                      effective_limit(cfg.data.max_prompt_tokens, model_positions(model_dir), cfg.rollout.max_new_tokens))
    score = _scorer(cfg)

    source = prompt_source.build(samples, seed=cfg.run.seed, state=state["cursor"], stratify=cfg.data.stratify,
                                 staleness=t.staleness)
    history: list[dict] = state.get("history", [])
    kl_ctrl = _kl_controller(cfg, state.get("kl_coef"))
    a = cfg.algorithm
    entropy_ctrl = None if a.entropy_target is None else EntropyControl(a, state.get("entropy_control"))

    cluster = ActorGroup(cfg, model_dir, spec)
    try:
        reference = out_dir / "warmup_reference"
        if forked is not None:  # the origin's reference, copied: the fork outlives the origin's pruning
            shutil.rmtree(reference, ignore_errors=True)
            if (forked.parent / "warmup_reference").exists():
                shutil.copytree(forked.parent / "warmup_reference", reference)
        if resume_from:
            cluster.all("load", str(resume_from))
            if reference.exists():
                cluster.all("load_reference", str(reference))
        elif t.warmup_sft_steps:
            _warmup(cfg, cluster, samples, adapter, log_metrics)
            cluster.all("reset_optimizer")  # RL's Adam starts fresh: the warm-up's moments are no measure of RL's gradients
            # KL is measured from where RL starts (the warmed-up weights), also after a resume.
            cluster.all("adopt_reference")
            shutil.rmtree(reference, ignore_errors=True)
            cluster.all("save_reference", str(reference))
        cluster.rollout.prefetch(source.peek(t.prompts_per_step))
        # Mandatory: the engines start from the checkpoint, the policy may be a resumed or warmed-up one.
        cluster.sync_weights(state["step"])
        step = state["step"]
        tables = RolloutTables(log_table, t.log_rollouts_every, t.rollout_table_rows)
        before_rl: dict[str, float] = {}
        if val_samples and t.val_every and step == 0:  # where RL starts from (after any warm-up), logged at step 0
            before_rl = validate(cfg, cluster, val_samples, adapter, score)
            log_metrics(before_rl, 0)
        producer = None
        if t.mode != "synchronous" and step < t.steps:  # the next batches are generated while the ranks train
            producer = RolloutProducer(lambda s, v: produce(cfg, cluster, source, adapter, score, s, v),
                                       lambda: cluster.sync_weights(None), first=step + 1, last=t.steps,
                                       max_staleness=t.staleness, trained=step, engine_version=cluster.rollout_version)
        idle_seen = 0.0
        try:
            while step < t.steps:
                step += 1
                collected = None
                if producer is not None:
                    t_wait = time.perf_counter()
                    collected = producer.take()
                    waited = time.perf_counter() - t_wait
                metrics = one_step(cfg, cluster, source, adapter, score, step, kl_ctrl, tables=tables,
                                   collected=collected, entropy_ctrl=entropy_ctrl)
                if producer is not None:
                    producer.trained(step)
                    wall = metrics["time/step_s"] + waited
                    metrics["perf/trainer_wait_s"] = waited  # the ranks had no batch to train on
                    metrics["perf/trainer_idle_frac"] = waited / max(wall, 1e-9)
                    idle, idle_seen = producer.idle_s - idle_seen, producer.idle_s
                    metrics["perf/rollout_idle_frac_async"] = min(idle / max(wall, 1e-9), 1.0)  # held at the gate
                if val_samples and t.val_every and (step % t.val_every == 0 or step == t.steps):
                    with producer.quiesce() if producer is not None else nullcontext():
                        if cluster.rollout_version < step:  # validation scores the newest policy
                            cluster.sync_weights(None if producer is not None else step)
                        metrics.update(validate(cfg, cluster, val_samples, adapter, score, tables=tables))
                history.append({"step": step, **metrics})
                log_metrics(metrics, step)
                tables.flush(step)
                if step == t.steps or (t.save_every and step % t.save_every == 0):
                    _save(cluster, out_dir, step, source, history, cfg, model_dir,
                          kl_coef=kl_ctrl.value if kl_ctrl is not None else None,
                          cursor=collected.cursor if collected is not None else None,
                          entropy_control=entropy_ctrl.state() if entropy_ctrl is not None else None)
                    ckpt_io.prune(out_dir, t.keep_last)
        finally:
            if producer is not None:
                producer.close()
        final = ckpt_io.latest_checkpoint(out_dir)
        if not (final / "probe.pt").exists():
            _write_probe(cluster, source.samples, adapter, final)
    finally:
        cluster.shutdown()
    return TrainResult(checkpoint=final, steps=step, history=history, before_rl=before_rl, resumed_from=state["step"],
                       forked_from=forked)


def _kl_controller(cfg: Config, value: float | None):
    a = cfg.algorithm
    if not a.use_kl_in_reward:
        return None
    start = a.kl_coef if value is None else value
    if a.kl_type == "adaptive":
        return rl.AdaptiveKLController(start, a.kl_target, a.kl_horizon)
    return rl.FixedKLController(start)


def validate(cfg: Config, cluster: ActorGroup, samples: list[dict], adapter, score,
             tables: RolloutTables | None = None) -> dict[str, float]:
    """Greedy answers on (up to `val_limit`) held-out samples from the current rollout weights."""
    rows = samples[: cfg.trainer.val_limit]
    answers = cluster.rollout.prepare(rows)
    # Unreadable media: left out of validation (the cache stage lists them).
    chosen = [(row, a["handle"]) for row, a in zip(rows, answers) if "error" not in a]
    if not chosen:
        return {}
    handles = [h for _, h in chosen]
    outs = cluster.rollout.generate(handles, sampling(cfg, cfg.run.seed, greedy=True))
    cluster.rollout.release(handles)
    scores, _ = score([o[0]["text"] for o in outs], [reward_sample(s) for s, _ in chosen])
    if tables is not None:
        tables.saw_validation([s for s, _ in chosen], [o[0]["text"] for o in outs], scores,
                              [len(o[0]["token_ids"]) for o in outs])
    return {**{f"val/{k}": float(np.mean([s.get(k, 0.0) for s in scores])) for k in ("overall", "accuracy", "format")},
            **accuracy_by_family([s for s, _ in chosen], scores, "val/accuracy")}


def _warmup(cfg: Config, cluster: ActorGroup, samples: list[dict], adapter, log_metrics) -> None:
    """Supervised cold start on the answer format (`trainer.warmup_answers` says what goes in the tag),
    from its own seeded order (the RL order is untouched)."""
    t, ro = cfg.trainer, cfg.rollout
    source = PromptSource(samples, seed=cfg.run.seed + 7919)
    eos = adapter.eos_token_ids[:1]
    for step in range(1, t.warmup_sft_steps + 1):
        # As many sequences as an RL step (prompts_per_step × n), each prompt with n targets (n
        # draws from its answer space under warmup_answers=answer_space) and read once.
        drawn, handles, _ = draw_readable(source, cluster.rollout, t.prompts_per_step, {})
        cluster.rollout.release(handles)
        batch = [s for s in drawn for _ in range(ro.n)]
        targets = [adapter.tokenizer.encode(warmup.target(s, t.warmup_answers, seed=cfg.run.seed, step=step, draw=i % ro.n),
                                            add_special_tokens=False) + eos for i, s in enumerate(batch)]
        shards = make_shards(data_parallel(t), batch, targets, [[] for _ in targets])
        metrics = cluster.each_shard("sft_step", shards)
        log_metrics({k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]}, step)


def _save(cluster: ActorGroup, out_dir: Path, step: int, source: PromptSource, history, cfg: Config, model_dir, *,
          kl_coef: float | None, cursor: dict | None = None, entropy_control: dict | None = None) -> Path:
    """Shards and state into `step_N.tmp`, then one rename: a crash mid-save never leaves a folder
    that looks complete."""
    final = ckpt_io.step_dir(out_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cluster.all("save", str(tmp))
    # `cursor`: where the prompts stood after step `step`'s draws (a producer thread may have drawn further).
    ckpt_io.write_state(tmp, {"step": step, "cursor": source.state(cursor), "history": history, "seed": cfg.run.seed,
                              "base_model": str(model_dir), "world_size": cfg.trainer.world_size,
                              "kl_coef": kl_coef, "entropy_control": entropy_control})
    ckpt_io.publish(tmp, final)
    return final


def _write_probe(cluster: ActorGroup, samples: list[dict], adapter, ckpt: Path) -> None:
    """Logits of the final weights on a fixed input (the first readable sample), kept with the
    checkpoint so merge can verify itself. The FSDP2 ranks compute them from the trained weights
    themselves (any rollout engine, vLLM included, may hold another copy); rows go a few at a time."""
    response = adapter.tokenizer.encode("<answer>A</answer>", add_special_tokens=False)
    for start in range(0, len(samples), 8):
        row = cluster.rollout.first_readable(samples[start:start + 8])
        if row is not None:
            torch.save(cluster.all("probe_logits", row, response)[0], ckpt / "probe.pt")
            return
