"""The actor group: the driver's handle on the Ray actors that do the work (slime's `ray/actor_group.py`).

`world_size` FSDP2 policy ranks and the rollout side: an engine inside every rank (colocated) or
one rollout worker beside them (separate), behind `rollout_backend.RolloutBackend`. Every call from
the driver to them goes through `ActorGroup` and its `MessageLog`, which measures what the driver
sends; the loop in `trainer.py` only calls `all`, `each_shard`, `announce`, `rollout` and `sync_weights`.
"""

from __future__ import annotations

import threading
from pathlib import Path

import ray

from evr1 import rl
from evr1.config import Config
from evr1.models.runtime import configured_dtype
from evr1.train.messages import MessageLog
from evr1.train.protocol import ReaderSpec, Shard
from evr1.train.workers.policy import PolicyWorker
from evr1.train.workers.rollout import RolloutWorker


def worker_options(cfg: Config) -> dict:
    """The settings every policy rank is built with, read once from the config."""
    a, t = cfg.algorithm, cfg.trainer
    return {
        "device": t.device, "seed": cfg.run.seed, "dtype": cfg.model.dtype,
        "attn_implementation": cfg.model.attn_implementation,
        "gradient_checkpointing": cfg.model.gradient_checkpointing,
        "use_kl_loss": a.use_kl_loss and a.kl_loss_coef > 0, "kl_loss_coef": a.kl_loss_coef,
        "needs_reference": a.needs_reference,
        "collective_timeout_s": t.collective_timeout_s,
        "kl_penalty": a.kl_penalty, "entropy_coeff": a.entropy_coeff, "policy_loss": a.policy_loss,
        "top_entropy_ratio": a.top_entropy_ratio,
        "loss_agg_mode": a.loss_agg_mode or rl.POLICY_LOSSES[a.policy_loss].default_agg_mode,
        "loss_scale_factor": a.loss_scale_factor or float(cfg.rollout.max_new_tokens),
        "loss_options": {k: v for k, v in a.loss_options().items() if k not in ("loss_agg_mode", "loss_scale_factor")},
        "betas": list(t.betas), "weight_decay": t.weight_decay, "grad_clip": t.grad_clip,
        "lr": t.lr, "warmup_lr": t.warmup_lr or t.lr, "micro_batch_size": t.micro_batch_size,
        "ppo_epochs": t.ppo_epochs, "prefetch_prompts": t.prefetch_prompts, "cpus": t.cpus,
        "warmup_keeps_vision": t.warmup_keeps_vision,
        "padding_free": t.padding_free, "freeze_vision_tower": cfg.model.freeze_vision_tower,
        "logits_chunk_tokens": t.logits_chunk_tokens,
        "sequence_parallel": t.sequence_parallel, "reuse_vision_features": t.reuse_vision_features,
        # Log-probs are taken at the sampling temperature, as the rollout drew them (greedy: 1).
        "temperature": cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
    }


def engine_options(cfg: Config) -> dict:
    """The rollout engine's own options: `rollout.vllm` for vLLM (seeded by the run), none for HF."""
    if cfg.rollout.engine != "vllm":
        return {}
    options = {**cfg.rollout.vllm.engine_options(), "seed": cfg.run.seed}
    if cfg.rollout.placement_for(cfg.trainer.device) == "colocated" and cfg.trainer.device == "cuda" \
            and cfg.rollout.sleep_level:
        options["enable_sleep_mode"] = True  # asleep while its rank trains (vLLM has sleep mode on CUDA only)
    if options["logprobs_mode"] == "auto":
        options["logprobs_mode"] = "raw_logprobs" if cfg.rollout.temperature in (0.0, 1.0) else "processed_logprobs"
    return options


class ActorGroup:
    """The actor group: `world_size` FSDP2 ranks and the rollout side (`rollout_backend`).

    The resources are planned from the config (`placement.plan_resources`) and checked against the
    cluster before any actor starts: a config that does not fit fails at once with one line, one
    that fits is placed in a placement group (rank i on bundle i, a colocated engine in its rank's
    process). Rank 0 then names a free port on its own node for the rendezvous, so the group also
    forms when Ray places rank 0 on a different node from the driver. Every call goes through
    `messages`, which measures what the driver sends.
    """

    def __init__(self, cfg: Config, model_dir: Path, spec: ReaderSpec):
        from evr1.train import placement
        from evr1.train.rollout_backend import ColocatedRollout, SeparateRollout

        t = cfg.trainer
        self.plan, self.pg = placement.reserve(cfg)  # fails at once, in one line, when the cluster is too small
        options = worker_options(cfg)
        self.messages = MessageLog()
        # Calls to the ranks are submitted under this lock, a whole round at a time: with two driver
        # threads (asynchronous rollouts) every rank still sees the collectives in the same order.
        self._lock = threading.RLock()
        self.updates = 0  # `step` rounds submitted so far: the policy version a later sync sends
        self.sequence_parallel = t.sequence_parallel
        self.actors: list = []
        self.ranks = [ray.remote(PolicyWorker).options(**placement.actor_options(self.plan, self.pg, "rank", r))
                      .remote(r, t.world_size, str(model_dir), options, spec) for r in range(t.world_size)]
        self.actors += self.ranks
        engine = {"batch_size": cfg.rollout.batch_size,
                  "dtype": configured_dtype(cfg.model, t.device),  # bf16 on GPU unless set
                  "device": t.device, "prefetch_prompts": t.prefetch_prompts,
                  "engine_options": engine_options(cfg), "cpus": cfg.rollout.cpus, "seed": cfg.run.seed}
        master = ray.get(self.ranks[0].endpoint.remote())
        self.all("setup", master)
        if self.plan.mode == "colocated":
            self.all("build_engine", cfg.rollout.engine, engine, cfg.rollout.sleep_level)
            self.rollout = ColocatedRollout(self.ranks, self.messages, gather=lambda refs: gather(refs, self))
        else:
            workers = [ray.remote(RolloutWorker).options(**placement.actor_options(self.plan, self.pg, "rollout", w))
                       .remote(str(model_dir), cfg.rollout.engine, {**engine, "index": w}, spec)
                       for w in range(cfg.rollout.engines)]
            self.actors += workers
            dtype = str(engine["dtype"]).removeprefix("torch.")
            self.rollout = SeparateRollout(workers, self.ranks, self.messages, weight_dtype=dtype,
                                           bucket_bytes=int(cfg.rollout.sync_bucket_mb * 2**20),
                                           gather=lambda refs: gather(refs, self), submit_lock=self._lock,
                                           updates=lambda: self.updates)

    def all(self, method: str, *args) -> list:
        with self._lock:
            refs = [self.messages.call(getattr(r, method), *args) for r in self.ranks]
        return gather(refs, self)

    def each(self, method: str, per_rank: list) -> list:
        with self._lock:
            refs = [self.messages.call(getattr(r, method), *args) for r, args in zip(self.ranks, per_rank)]
            self.updates += method == "step"
        return gather(refs, self)

    def each_shard(self, method: str, shards: list[Shard], *args) -> list:
        """`method(shard, *args)` on every rank, the ranks of a sequence-parallel group sharing one
        shard (one per data-parallel index); one answer per shard, from the group's first rank."""
        sp = len(self.ranks) // len(shards)
        return self.each(method, [(shards[r // sp], *args) for r in range(len(self.ranks))])[::sp]

    def announce(self, rows: list[dict], n: int) -> None:
        """Tell each rank which prompts it will most likely train on (its equal share of the n·P
        responses, as `protocol.make_shards` cuts them), so it reads them during generation. Not waited for."""
        sp = self.sequence_parallel
        per = len(rows) * n // (len(self.ranks) // sp)
        if not per:
            return
        for r, rank in enumerate(self.ranks):
            k = r // sp  # the ranks of a sequence-parallel group read the same share
            first, last = k * per // n, ((k + 1) * per - 1) // n
            self.messages.call(rank.prefetch, rows[first:last + 1])

    @property
    def rollout_version(self) -> int:
        """The policy version (updates) the rollout engines hold."""
        return self.rollout.version

    def sync_weights(self, version: int) -> dict[str, float]:
        """The policy's weights into every rollout engine (`RolloutBackend.sync`): what was moved."""
        return self.rollout.sync(version)

    def kill(self) -> None:
        rollout = getattr(self, "rollout", None)
        if rollout is not None:
            try:
                rollout.close()
            except Exception:  # noqa: BLE001 - killing the group must not stop at its queue
                pass
        for actor in self.actors:
            ray.kill(actor)
        if self.pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.pg)
            self.pg = None

    def shutdown(self) -> None:
        try:
            ray.get([r.shutdown.remote() for r in self.ranks], timeout=60)
        except Exception:  # noqa: BLE001 - a dead rank must not stop the others from being killed
            pass
        self.kill()


def gather(refs: list, cluster: ActorGroup | None = None) -> list:
    """`ray.get` that fails fast: the first task to raise kills the group, so the other ranks do not
    sit in a collective waiting for a peer that will never come."""
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(done[0])
        except Exception:
            if cluster is not None:
                cluster.kill()
            raise
    return ray.get(refs)
