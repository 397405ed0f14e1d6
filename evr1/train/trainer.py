"""The GRPO-family training loop on Ray: rollout → reward → advantages → FSDP2 update → weight sync.

The driver (this module) owns the data cursor and the small per-step math; Ray actors own the
models. One call to `train()` is one long stage: Prefect sees its start, end and result, MLflow
sees every step.
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
from evr1.config import Config
from evr1.models.prompt_length import effective_limit, model_positions
from evr1.data.ingest import reward_sample
from evr1.models import load_adapter
from evr1.train import checkpoint as ckpt_io
from evr1.models.packed import supports_packing
from evr1.train import micro_batches
from evr1.train.actor_group import ActorGroup
from evr1.train.protocol import ReaderSpec, Shard, data_parallel, grouped_calls, make_shards, row_key, shard_slices
from evr1.train import prompt_source
from evr1.train.prompt_source import PromptSource
from evr1.cluster.connect import ensure_ray
from evr1.train.collect import FIELDS, Rollout, collect, draw_readable, sampling
from evr1.train.async_rollouts import Collected, RolloutProducer
from evr1.train.rollout_backend import idle_fraction
from evr1.train.rollout_table import RolloutTables, TableSink
from evr1.train import diagnostics, offline, warmup
from evr1.train.breakdown import accuracy_by_family
from evr1.train.schedule import lr_at





@dataclass
class TrainResult:
    checkpoint: Path
    steps: int
    history: list[dict] = field(default_factory=list)
    before_rl: dict[str, float] = field(default_factory=dict)  # validation after the warm-up, before step 1
    resumed_from: int = 0  # the checkpoint step this training continued from (0: it started fresh)

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


def train(cfg: Config, *, samples: list[dict], frames_uri: str | None, model_dir: Path, out_dir: Path,
          log_metrics: Callable[[dict, int], None] = lambda m, s: None,
          val_samples: list[dict] | None = None, log_table: TableSink | None = None) -> TrainResult:
    """Run `cfg.trainer.steps` GRPO steps from `model_dir`; resume from `out_dir` when it holds a checkpoint.

    `log_table(artifact_file, rows)` receives the readable rollout and validation tables (evr1/train/rollout_table.py)."""
    t = cfg.trainer
    out_dir.mkdir(parents=True, exist_ok=True)
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

    if not t.resume:
        ckpt_io.clear(out_dir)  # asked not to resume: an older run's checkpoints must not mix with this one's
    resume_from = ckpt_io.latest_checkpoint(out_dir)
    state = ckpt_io.read_state(resume_from) if resume_from else {"step": 0, "cursor": {}, "history": []}
    source = prompt_source.build(samples, seed=cfg.run.seed, state=state["cursor"], stratify=cfg.data.stratify,
                                 staleness=t.staleness)
    history: list[dict] = state.get("history", [])
    kl_ctrl = _kl_controller(cfg, state.get("kl_coef"))

    cluster = ActorGroup(cfg, model_dir, spec)
    try:
        reference = out_dir / "warmup_reference"
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
            producer = RolloutProducer(lambda s, v: _produce(cfg, cluster, source, adapter, score, s, v),
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
                metrics = _one_step(cfg, cluster, source, adapter, score, step, kl_ctrl, tables=tables,
                                    collected=collected)
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
                          cursor=collected.cursor if collected is not None else None)
                    ckpt_io.prune(out_dir, t.keep_last)
        finally:
            if producer is not None:
                producer.close()
        final = ckpt_io.latest_checkpoint(out_dir)
        if not (final / "probe.pt").exists():
            _write_probe(cluster, source.samples, adapter, final)
    finally:
        cluster.shutdown()
    return TrainResult(checkpoint=final, steps=step, history=history, before_rl=before_rl, resumed_from=state["step"])


def _kl_controller(cfg: Config, value: float | None):
    a = cfg.algorithm
    if not a.use_kl_in_reward:
        return None
    start = a.kl_coef if value is None else value
    if a.kl_type == "adaptive":
        return rl.AdaptiveKLController(start, a.kl_target, a.kl_horizon)
    return rl.FixedKLController(start)


def _collect_step(cfg, cluster: ActorGroup, source: PromptSource, adapter, score, step: int,
                  version: int) -> Collected:
    """Generate and score step `step`'s batch (on the engines holding policy `version`), and start
    reading the next step's prompts."""
    source.begin_step(step)  # a stratified source's adaptive weights for this step's draws
    metrics: dict[str, float] = source.metrics()
    generated, batch = collect(cfg, cluster.rollout, source, adapter, score, step, metrics,
                               announce=lambda rows: cluster.announce(rows, cfg.rollout.n))
    if step < cfg.trainer.steps:  # the next step's prompts are read while this one computes log-probs and updates
        cluster.rollout.prefetch(source.peek(cfg.trainer.prompts_per_step))
    return Collected(step, generated, batch, metrics, source.state(), version)


def _produce(cfg, cluster: ActorGroup, source: PromptSource, adapter, score, step: int, version: int) -> Collected:
    """The producer thread's step: collect on the engines (policy `version`), then their data stats."""
    item = _collect_step(cfg, cluster, source, adapter, score, step, version)
    item.rollout_stats = cluster.rollout.data_stats()
    return item


def _one_step(cfg, cluster: ActorGroup, source: PromptSource, adapter, score, step: int, kl_ctrl,
              tables: RolloutTables | None = None, collected: Collected | None = None) -> dict:
    """One GRPO step. Synchronous: collect, train, sync. With `collected` (asynchronous modes), the
    batch was generated by the producer thread (evr1/train/async_rollouts.py), which also syncs."""
    t, a = cfg.trainer, cfg.algorithm
    t0 = time.perf_counter()
    synchronous = collected is None
    if synchronous:
        collected = _collect_step(cfg, cluster, source, adapter, score, step, cluster.rollout_version)
        collected.rollout_stats = cluster.rollout.data_stats()
    generated, batch, metrics = collected.generated, collected.batch, dict(collected.metrics)
    behind = (step - 1) - collected.version  # the trained policy's version minus the generating one's
    metrics.update({"rollout/staleness": float(behind), "rollout/policy_version": float(collected.version)})
    # A colocated engine resets its caches and sleeps: the rank's device is the trainer's until the sync.
    metrics.update({f"perf/engine_{k}": v for k, v in cluster.rollout.training().items()})
    t_gen = time.perf_counter()
    if not synchronous:
        metrics["time/collect_s"] = collected.collect_s  # overlapped with training: not on the critical path
        metrics.update({f"perf/sync_{k}": float(v) for k, v in collected.sync.items() if k != "seconds"})
        if collected.sync:
            metrics["time/sync_s"] = float(collected.sync.get("seconds", 0.0))
    metrics.update(_reward_metrics(generated))
    # a stratified source's adaptive weights follow each stratum's share of groups that teach nothing
    source.observe(step, prompt_source.zero_advantage_rates(generated.rows, generated.groups,
                                                            [s["overall"] for s in generated.scores], source.stratum))
    if not len(batch):
        # Every group scored alike (dynamic sampling kept none): nothing to learn from this step.
        metrics.update({"data/skipped": 1.0, "time/step_s": time.perf_counter() - t0})
        metrics.update(_data_metrics(cluster, len(generated.group_order()), [], collected.rollout_stats))
        if tables is not None:  # what was generated, with no advantage: a reader sees why nothing was kept
            tables.saw_step(generated, None)
        return metrics

    if t.max_tokens_per_micro_batch:  # whole groups dealt out so that every rank gets as many tokens
        seq_tokens = [p + len(r) for p, r in zip(batch.prompt_tokens, batch.responses)]
        order = micro_batches.balance_groups(batch.groups, seq_tokens, data_parallel(t))
        batch = _reordered(batch, order) if order else batch
    lengths = [len(r) for r in batch.responses]
    mask = torch.zeros(len(lengths), max(lengths))
    for row, n in enumerate(lengths):
        mask[row, :n] = 1.0
    # Strictly on-policy, the old log-probs are the update's own (detached): no pass for them. The
    # reference's still run before the update, when a KL term needs them.
    skip_old = cfg.skips_old_log_probs()
    old: list[list[float]] | None = None
    ref: list[list[float]] | None = None
    rank_waits = [0.0] * data_parallel(t)
    if not skip_old or a.needs_reference:
        shards = make_shards(data_parallel(t), batch.rows, batch.responses, [[] for _ in lengths])
        metrics.update(_cut(cfg, shards, batch.prompt_tokens, _pass_mode(cfg, adapter, _sharing(t)), "log_probs"))
        if _sharing(t):  # each prompt run once under its n responses (evr1.models.shared_prefix)
            calls = grouped_calls(shards, t.micro_batch_size)
            for s in shards:
                s.log_prob_calls = calls
        log_probs = cluster.each_shard("log_probs", shards, not skip_old)
        rank_waits = [part["data_wait_s"] for part in log_probs]
        old = None if skip_old else [row for part in log_probs for row in part["old"]]
        ref = [row for part in log_probs for row in part["ref"]] if log_probs[0]["ref"] is not None else None
    t_lp = time.perf_counter()

    overall = torch.tensor([s["overall"] for s in batch.scores], dtype=torch.float32)
    if a.overlong_buffer_len:
        overall = overall + rl.overlong_penalty(lengths, max_response_length=cfg.rollout.max_new_tokens,
                                                buffer_len=a.overlong_buffer_len,
                                                penalty_factor=a.overlong_penalty_factor).float()
    scores = overall
    if kl_ctrl is not None:
        token_scores = rl.scores_to_token_rewards(overall, mask)
        scores, current_kl = rl.apply_kl_in_reward(token_scores, _rows(old, mask), _rows(ref, mask), mask,
                                                   kl_coef=kl_ctrl.value, kind=a.kl_reward_penalty)
        metrics.update({"actor/reward_kl": current_kl, "actor/kl_coef": kl_ctrl.value})
        kl_ctrl.update(current_kl, len(lengths))
    if a.adv_estimator == "gdpo":
        scores = {k: torch.tensor([float(s.get(k, 0.0)) for s in batch.scores]) for k in a.gdpo_reward_keys}
    options = a.estimator_options()
    if a.adv_estimator == "remax":
        options["baseline_scores"] = torch.tensor(batch.baseline, dtype=torch.float32)
    advantages, _ = rl.compute_advantages(a.adv_estimator, scores, batch.groups, mask, **options)
    t_adv = time.perf_counter()

    # Skipped pass: the engines' log-probs are compared with the update's own after it (no correction then).
    weights = _rollout_correction(cfg, batch, old, mask, metrics) if old is not None else None
    if weights is not None:
        advantages = advantages * weights
    token_adv = [advantages[row, :n].tolist() for row, n in enumerate(lengths)]
    shards = make_shards(data_parallel(t), batch.rows, batch.responses, token_adv, old=old, ref=ref,
                     mini_batch_size=t.mini_batch_size)
    # HF's gradient checkpointing drops the prompt's cache under grad: that update stays unshared.
    update_shared = _sharing(t) and not cfg.model.gradient_checkpointing
    metrics.update(_cut(cfg, shards, batch.prompt_tokens, _pass_mode(cfg, adapter, update_shared), "update"))
    if update_shared:
        calls = grouped_calls(shards, t.micro_batch_size, shards[0].mini_size)
        for s in shards:
            s.update_calls = calls
    lr = lr_at(step, base=t.lr, total=t.steps, warmup=t.lr_warmup_steps, schedule=t.lr_schedule,
               min_ratio=t.min_lr_ratio)
    rank_metrics = cluster.each_shard("step", shards, lr, step)
    t_update = time.perf_counter()
    per_response = [m.pop("rows") for m in rank_metrics]  # in batch order: shards are contiguous
    if old is None:
        old = [r for part in per_response for r in part["log_probs"]]
        _rollout_correction(cfg, batch, [o if o is not None else [0.0] * n for o, n in zip(old, lengths)], mask,
                            metrics)
    if synchronous:
        moved = cluster.sync_weights(step)
        metrics.update({f"perf/sync_{k}": float(v) for k, v in moved.items() if k != "seconds"})
    t_sync = time.perf_counter()

    tokens = sum(batch.prompt_tokens) + sum(lengths)
    metrics.update(diagnostics.step_diagnostics(
        rows=batch.rows, groups=batch.groups, scores=batch.scores, reward=overall.tolist(),
        advantage=rl.masked_mean(advantages, mask, dim=-1).tolist(),
        advantage_abs_max=torch.where(mask.bool(), advantages.abs(), 0.0).amax(dim=-1).tolist(),
        texts=batch.texts, token_ids=batch.responses, entropies=[r for part in per_response for r in part["entropy"]],
        decode=adapter.decode))
    if skip_old:  # time/log_probs_s is then the reference's pass alone, or ~0 without one
        metrics["perf/old_log_probs_skipped"] = 1.0
    metrics.update({
        "adv/mean": float(rl.masked_mean(advantages, mask)), "data/epoch": float(source.cursor.epoch),
        "time/rollout_s": t_gen - t0, "time/log_probs_s": t_lp - t_gen, "time/advantage_s": t_adv - t_lp,
        "time/update_s": t_update - t_adv, "time/step_s": t_sync - t0,
        **({"time/sync_s": t_sync - t_update} if synchronous else {}),
        "perf/tokens": float(tokens), "perf/throughput": tokens / (t_sync - t0) / t.world_size,
        # Over every device the run holds, a separate rollout worker's included.
        "perf/tokens_per_s_per_device": tokens / (t_sync - t0) / (t.world_size + (cluster.rollout.placement == "separate")),
    })
    for key in ("data/cache_hits", "data/cache_misses", "perf/rank_vision_passes"):  # summed over ranks
        metrics[key.replace("data/cache", "data/rank_cache")] = float(sum(m.pop(key) for m in rank_metrics))
    for key in rank_metrics[0]:
        metrics[key] = float(np.mean([m[key] for m in rank_metrics]))
    metrics["data/rank_unreadable"] = float(sum(m["data/rank_unreadable"] for m in rank_metrics))
    for key in ("perf/rank_peak_rss_mb", "perf/rank_peak_device_mb"):  # the largest rank is what must fit
        if key in rank_metrics[0]:
            metrics[key] = float(max(m[key] for m in rank_metrics))
    waits = [w + m["time/rank_data_wait_s"] for w, m in zip(rank_waits, rank_metrics)]
    metrics.update(_data_metrics(cluster, len(generated.group_order()), waits, collected.rollout_stats))
    metrics["perf/vision_passes_per_prompt"] = ((metrics["perf/rank_vision_passes"] + metrics.pop("perf/rollout_vision_passes"))
                                                / max(len(generated.group_order()), 1))
    if tables is not None:  # each response's scalar advantage: its first response token's
        tables.saw_step(batch, advantages[:, 0].tolist())
    return metrics


def _rollout_correction(cfg: Config, batch: Rollout, old: list[list[float]], mask: torch.Tensor,
                        metrics: dict) -> torch.Tensor | None:
    """Compare the rollout engine's log-probs with the trainer's (`rollout/logprob_gap_*`, logged on
    every step the engine returns them) and, with `rollout.correction.enabled`, the importance
    weights that multiply the advantages. Responses without engine log-probs (HF, offline
    trajectories) count as agreeing: weight 1."""
    if not any(b is not None for b in batch.behaviour):
        return None
    old_t = _rows(old, mask)
    behaviour = _rows([b if b is not None and len(b) == len(o) else o for b, o in zip(batch.behaviour, old)], mask)
    metrics.update(rl.gap_metrics(old_t, behaviour, mask))
    c = cfg.rollout.correction
    if not c.enabled:
        return None
    weights, stats = rl.importance_weights(old_t, behaviour, mask, level=c.level, mode=c.mode, threshold=c.threshold)
    metrics.update(stats)
    return weights


def _data_metrics(cluster: ActorGroup, prompts: int, rank_waits: list[float], rollout: dict) -> dict[str, float]:
    """What the driver sent this step and how long the workers waited for frames (the slowest rank);
    `rollout`: the engines' data stats for the step (`RolloutBackend.data_stats`)."""
    sent = cluster.messages.take()
    per_engine = rollout["generate_s_per_engine"]
    engines = {"perf/rollout_engines": float(len(per_engine)), "perf/rollout_idle_frac": idle_fraction(per_engine),
               "perf/gen_tokens_per_s": rollout["generated_tokens"] / max(rollout["generate_s"], 1e-9)}
    return {**engines, "perf/driver_bytes": float(sent["bytes"]), "perf/driver_bytes_per_prompt": sent["bytes"] / max(prompts, 1),
            "perf/driver_array_messages": float(sent["array_calls"]),
            "time/data_wait_s": rollout["wait_s"] + max(rank_waits, default=0.0),
            "perf/rollout_peak_rss_mb": rollout["peak_rss_mb"],
            "data/rollout_cache_hits": rollout["data/cache_hits"], "data/rollout_cache_misses": rollout["data/cache_misses"],
            "perf/rollout_vision_passes": float(rollout["vision_passes"])}


def _pass_mode(cfg: Config, adapter, shared: bool) -> str:
    """How a pass lays out its micro-batches: shared prompt prefix, packed (padding-free) or padded
    (sequence parallelism splits the padded batch)."""
    if shared:
        return "shared"
    t = cfg.trainer
    packed = t.padding_free and supports_packing(adapter.family.name) and t.sequence_parallel == 1
    return "packed" if packed else "padded"


def _cut(cfg: Config, shards: list[Shard], prompt_tokens: list[int], mode: str, name: str) -> dict[str, float]:
    """Cut every rank's share into micro-batches by `trainer.max_tokens_per_micro_batch` (as many on
    every rank), and report the pass's micro-batches per rank and padding share either way."""
    t = cfg.trainer
    per = len(shards[0].responses)
    mini = shards[0].mini_size or per
    prompts = [prompt_tokens[k * per:(k + 1) * per] for k in range(len(shards))]
    responses = [[len(r) for r in s.responses] for s in shards]
    keys = [[row_key(r) for r in s.rows] for s in shards]
    bounds = [(a, min(a + mini, per)) for a in range(0, per, mini)]
    fixed = [shard_slices(s, t.micro_batch_size, shards[0].mini_size) for s in shards]
    cuts, figures = micro_batches.plan(prompts, responses, keys, bounds, mode, t.max_tokens_per_micro_batch, fixed)
    if t.max_tokens_per_micro_batch:
        for s, c in zip(shards, cuts):
            s.micro = c
    return {f"perf/{name}_{k}": v for k, v in figures.items()}


def _reordered(batch: Rollout, order: list[int]) -> Rollout:
    """The batch's responses in `order` (every per-response field follows)."""
    out = Rollout()
    for name in FIELDS:
        values = getattr(batch, name)
        if values:
            setattr(out, name, [values[i] for i in order])
    return out


def _sharing(t) -> bool:
    """Shared prompt prefix only where a micro-batch can hold several responses of one prompt: with
    micro-batches of one response it would run the prompt and the response as two forwards for nothing.
    Off under sequence parallelism, which splits the padded batch's sequences instead."""
    return t.share_prompt_prefix and t.micro_batch_size > 1 and t.sequence_parallel == 1


def _rows(rows: list[list[float]], mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(mask.shape)
    for i, values in enumerate(rows):
        out[i, : len(values)] = torch.tensor(values)
    return out


def _reward_metrics(r: Rollout) -> dict[str, float]:
    """Reward and response statistics over everything generated this step (kept or not)."""
    def mean(key):
        return float(np.mean([s.get(key, 0.0) for s in r.scores]))
    overall = np.array([s["overall"] for s in r.scores])
    lengths = [len(x) for x in r.responses]
    return {"reward/overall": mean("overall"), "reward/accuracy": mean("accuracy"), "reward/format": mean("format"),
            "reward/overall_std": float(overall.std(ddof=1)) if len(overall) > 1 else 0.0,
            "response/length_mean": float(np.mean(lengths)), "response/length_max": float(max(lengths)),
            "response/clip_ratio": float(np.mean(r.truncated)),
            **accuracy_by_family(r.rows, r.scores, "reward/accuracy"),
            **offline.metrics(r.offline, r.scores, r.responses, r.truncated)}  # apart, in mixed offline-online mode


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
          kl_coef: float | None, cursor: dict | None = None) -> Path:
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
                              "kl_coef": kl_coef})
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
