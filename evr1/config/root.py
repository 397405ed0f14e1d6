"""The whole run, composed once from the sections, with the rules that span sections (`Config._consistent`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import field_validator, model_validator

from evr1.config.base import Section
from evr1.config.data import CacheConfig, DataConfig
from evr1.config.eval import EvalConfig
from evr1.config.model import ModelConfig
from evr1.config.train import AlgorithmConfig, RewardConfig, RolloutConfig, TrainerConfig, off_policy_reasons


class RunConfig(Section):
    name: str = "run"
    # Every output of a run goes under <root>/<name>; a relative root is resolved against the working
    # directory when the config is loaded, so the same config run from two checkouts stays apart.
    root: str = "runs"
    seed: int = 0

    @field_validator("root")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return str(Path(value).expanduser().resolve())

    @field_validator("name")
    @classmethod
    def _inside_root(cls, value: str) -> str:
        """A relative path under run.root: `../x`, `/x` and `~/x` would put the run folder elsewhere."""
        parts = value.replace("\\", "/").split("/")
        bad_part = any(p in ("", ".", "..") for p in parts)
        if not value.strip() or value.startswith(("/", "~")) or bad_part or "\0" in value:
            raise ValueError(f"run.name {value!r} must be a relative folder name inside run.root "
                             "(no '..', '/' or '~' prefix)")
        return value


class TrackingConfig(Section):
    enabled: bool = True
    # MLflow tracking URI; None means sqlite:///<run folder>/mlflow.db with artifacts beside it.
    uri: str | None = None
    experiment: str = "evr1"
    register_model: str | None = "evr1-policy"


class OrchestrationConfig(Section):
    # A Ray cluster address ("auto", "ray://host:10001"); None starts a small local instance.
    ray_address: str | None = None
    ray_num_cpus: int | None = 2
    ray_object_store_mb: int = 256


class Config(Section):
    """The whole run: what `evr1 run conf/x.yaml` and the `train-and-eval` flow take."""

    run: RunConfig = RunConfig()
    data: DataConfig
    cache: CacheConfig = CacheConfig()
    model: ModelConfig
    rollout: RolloutConfig = RolloutConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    reward: RewardConfig = RewardConfig()
    trainer: TrainerConfig = TrainerConfig()
    eval: EvalConfig = EvalConfig()
    tracking: TrackingConfig = TrackingConfig()
    orchestration: OrchestrationConfig = OrchestrationConfig()

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        a = self.algorithm
        if a.overlong_buffer_len > self.rollout.max_new_tokens:
            raise ValueError(f"algorithm: overlong_buffer_len ({a.overlong_buffer_len}) must not exceed "
                             f"rollout.max_new_tokens ({self.rollout.max_new_tokens})")
        t = self.trainer
        if t.world_size % t.sequence_parallel:
            raise ValueError(f"trainer: sequence_parallel ({t.sequence_parallel}) must divide world_size ({t.world_size})")
        if t.sequence_parallel > 1 and self.model.attn_implementation != "sdpa":
            raise ValueError(f"trainer: sequence_parallel needs model.attn_implementation sdpa (its all-to-all wraps "
                             f"torch's sdpa, which picks the flash kernel on GPU), not {self.model.attn_implementation}")
        if t.sequence_parallel > 1 and (t.micro_batch_size > 1 or t.max_tokens_per_micro_batch is not None):
            # Ulysses attends with a [B, 1, L, L] mask whenever the split batch has padding (17 GB at 130k tokens),
            # and has no packed (varlen) path: one sequence per micro-batch needs no mask at all (causal kernel).
            raise ValueError(f"trainer: sequence_parallel ({t.sequence_parallel}) needs one sequence per micro-batch "
                             f"(trainer.micro_batch_size 1, trainer.max_tokens_per_micro_batch unset; got "
                             f"{t.micro_batch_size}, {t.max_tokens_per_micro_batch}): a padded micro-batch would attend "
                             "with an L x L mask")
        if t.sequence_parallel > 1:
            heads, where = None, None
            if self.model.path is None and self.model.tiny is not None:
                from evr1.models.tiny import DEFAULT_SIZES

                heads = {**DEFAULT_SIZES, **self.model.tiny.sizes}["num_attention_heads"]
                where = "model.tiny.sizes.num_attention_heads"
            elif self.model.path is not None and (Path(self.model.path).expanduser() / "config.json").is_file():
                # Read lazily, only here: the decoder's heads (Qwen3-VL nests them under text_config).
                hf = json.loads((Path(self.model.path).expanduser() / "config.json").read_text())
                heads = (hf.get("text_config") or {}).get("num_attention_heads", hf.get("num_attention_heads"))
                where = f"num_attention_heads in {self.model.path}/config.json"
            # Key/value heads need not divide: Ulysses repeats them to one per query head when they do not.
            if isinstance(heads, int) and heads % t.sequence_parallel:
                raise ValueError(f"trainer: sequence_parallel ({t.sequence_parallel}) must divide the decoder's attention "
                                 f"heads ({heads}, {where}): Ulysses gives each rank heads / sequence_parallel heads")
        if a.offline_ratio > 0 and not self.data.offline_key:
            raise ValueError("algorithm: offline_ratio > 0 needs data.offline_key (the field holding the trajectories)")
        if t.mode != "synchronous" and self.rollout.placement_for(t.device) != "separate":
            raise ValueError(f"trainer: mode {t.mode} overlaps generation with training, so the engines need devices "
                             f"of their own: set rollout.placement=separate (it resolves to "
                             f"{self.rollout.placement_for(t.device)} here)")
        if a.use_kl_in_reward and a.adv_estimator == "gdpo":
            raise ValueError("algorithm: use_kl_in_reward does not combine with adv_estimator gdpo "
                             "(GDPO normalises separate reward components, not token rewards)")
        if a.dynamic_sampling and a.filter_rule == "mean_range" and not a.filter_low < a.filter_high:
            raise ValueError("algorithm: filter_low must be below filter_high")
        if self.rollout.n < 2 and a.adv_estimator in ("grpo", "rloo", "gdpo", "reinforce_plus_plus_baseline"):
            raise ValueError(f"rollout: n must be at least 2 for adv_estimator {a.adv_estimator} (a group of one "
                             "has no baseline: every advantage would be 0)")
        if self.rollout.n > 1 and self.rollout.temperature == 0:
            raise ValueError("rollout: temperature 0 (greedy) makes the n responses of a group identical, so "
                             "group-relative advantages are all 0; sample with temperature > 0")
        uses_vllm = self.rollout.engine == "vllm" or (self.eval.judge.enabled and self.eval.judge.engine == "vllm")
        if uses_vllm and self.trainer.device == "cuda" and self.rollout.vllm.max_model_len is None:
            raise ValueError("rollout: vllm.max_model_len is unset, so vLLM would reserve KV cache for the model's "
                             "whole context (262,144 tokens for Qwen3-VL-8B) and may not start: set it to the "
                             "longest prompt + response you run (e.g. data.max_prompt_tokens + rollout.max_new_tokens)")
        if a.use_kl_loss and a.use_kl_in_reward:
            raise ValueError("algorithm: use_kl_loss and use_kl_in_reward both apply a KL penalty; choose one")
        if t.skip_old_log_probs is True and (why := off_policy_reasons(a, self.rollout, t)):
            raise ValueError("trainer: skip_old_log_probs is true, but the update is not strictly on-policy, so its old "
                             f"log-probs are not its own: {'; '.join(why)}. Set it to auto or false")
        mini = self.trainer.mini_batch_size
        batch = self.trainer.prompts_per_step * self.rollout.n
        if mini is not None and (batch % mini or mini % self.trainer.world_size):
            raise ValueError(f"trainer: mini_batch_size ({mini}) must divide prompts_per_step × rollout.n ({batch}) "
                             f"and be divisible by trainer.world_size ({self.trainer.world_size})")
        if batch % self.trainer.world_size:
            raise ValueError(
                f"trainer: prompts_per_step × rollout.n = {batch} must be divisible by trainer.world_size "
                f"= {self.trainer.world_size} so every FSDP rank gets the same number of sequences"
            )
        return self

    def skips_old_log_probs(self) -> bool:
        """Whether the trainer skips the old log-prob pass (`trainer.skip_old_log_probs`, auto resolved)."""
        if self.trainer.skip_old_log_probs == "auto":
            return not off_policy_reasons(self.algorithm, self.rollout, self.trainer)
        return bool(self.trainer.skip_old_log_probs)

    def run_dir(self) -> Path:
        return Path(self.run.root) / self.run.name

    def fingerprint(self, *sections: str) -> str:
        """A short hash of the named sections (all when none): a cache key for Prefect and the stages."""
        data = self.model_dump(mode="json")
        chosen = {k: data[k] for k in (sections or data.keys())}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]
