"""The run configuration: one pydantic model per section, YAML files, and `a.b.c=value` overrides.

Every section forbids unknown keys, so a typo fails loudly with the key and the file instead of
silently falling back to a default (a trap in the reference project, its §7.1 item 11).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from evr1.video.clip import FrameParams
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A config file or override that does not validate; the message names the key and its source."""


def _leaf_types(annotation: Any) -> set[Any]:
    """The types a field admits, through Optional/Union (`int | None` → {int, NoneType})."""
    if get_origin(annotation) in (Union, type(int | None)):
        return set().union(*(_leaf_types(a) for a in get_args(annotation)))
    return {annotation}


class Section(BaseModel):
    # Strict where a lax reading wrecks a run: no NaN/inf floats, no `true` read as the number 1.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: Any) -> Any:
        if isinstance(value, bool):
            admits = _leaf_types(cls.model_fields[info.field_name].annotation)
            if admits & {int, float} and bool not in admits:
                raise ValueError(f"expected a number, not the boolean {str(value).lower()}")
        return value


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


class SynthConfig(Section):
    """Generate a synthetic video QA set into the run folder instead of reading `data.train_files`."""

    n: int = Field(48, ge=2)
    heldout: int = Field(16, ge=1)
    seed: int = 0
    image_fraction: float = Field(0.1, ge=0.0, le=1.0)
    size: tuple[int, int] = (64, 64)
    fps: int = 8
    seconds: float = 2.0
    # Only these kinds, in equal shares (e.g. the learning task's colour, direction, flashes, appears:
    # evr1/data/synth_tasks.py); empty: the default mix of every video kind plus `image_fraction` images.
    kinds: list[str] = []


class DataConfig(Section):
    train_files: list[str] = []
    eval_files: list[str] = []
    # Relative media paths are joined to this root; paths escaping it are rejected at ingestion.
    data_root: str | None = None
    synth: SynthConfig | None = None
    check_media_exists: bool = True
    # Longest prompt (text plus vision tokens, counted with the model family's rules) a record may
    # have; longer ones go to the rejects at ingestion with their length, and are refused again when
    # a prompt is built. Also capped by the model's positions minus rollout.max_new_tokens.
    max_prompt_tokens: int = Field(8192, ge=1)
    # Mixed offline-online training (EasyVideoR1 §4.5): the record field holding a pre-collected
    # trajectory (a string, the whole response text); with `has_offline_trajectory` true it replaces
    # the last of the sample's n responses (algorithm.offline_ratio of such samples). None: off.
    offline_key: str | None = None

    @model_validator(mode="after")
    def _has_source(self) -> "DataConfig":
        if self.synth is None and not self.train_files:
            raise ValueError("data: set either data.train_files or data.synth")
        return self


class CacheConfig(Section):
    """Frame sampling and resizing (qwen-vl-utils rules) and the Lance frame cache."""

    enabled: bool = True
    mode: Literal["prefer-cache", "cache-only", "decode-only"] = "prefer-cache"
    fps: float = Field(2.0, gt=0.0)
    max_frames: int = Field(768, ge=1)
    min_frames: int = Field(4, ge=1)
    nframes: int | None = Field(None, ge=1)
    min_pixels: int | None = Field(None, ge=1)
    max_pixels: int | None = Field(None, ge=1)
    total_pixels: int | None = Field(None, ge=1)
    rules: Literal["0.0.14", "0.0.8"] = "0.0.14"
    image_min_pixels: int | None = Field(None, ge=1)
    image_max_pixels: int | None = Field(None, ge=1)
    workers: int = Field(2, ge=0)
    timeout_s: float = Field(120.0, gt=0.0)
    # Lance URI of the frames table; defaults to <run folder>/lance/frames-v<store format>. Point several runs at one
    # shared URI (local or object storage) to reuse decoded frames across runs.
    uri: str | None = None

    @model_validator(mode="after")
    def _min_below_max(self) -> "CacheConfig":
        for low, high in (("min_frames", "max_frames"), ("min_pixels", "max_pixels"),
                          ("image_min_pixels", "image_max_pixels")):
            a, b = getattr(self, low), getattr(self, high)
            if a is not None and b is not None and a > b:
                raise ValueError(f"cache: {low} ({a}) must not exceed {high} ({b})")
        return self

    def frame_params(self, factor: int) -> FrameParams:
        """The sampling/resize parameters for a model family's resize factor (part of the cache key)."""
        names = [f.name for f in fields(FrameParams) if f.name != "factor"]
        return FrameParams(factor=factor, **{name: getattr(self, name) for name in names})


class TinyModelConfig(Section):
    family: Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] = "qwen3_vl"
    seed: int = 0
    # Overrides of evr1.models.tiny.DEFAULT_SIZES (hidden_size, num_hidden_layers, vision_depth, …).
    sizes: dict[str, int] = {}

    @field_validator("sizes")
    @classmethod
    def _known_sizes(cls, value: dict[str, int]) -> dict[str, int]:
        from evr1.models.tiny import DEFAULT_SIZES

        unknown = sorted(set(value) - set(DEFAULT_SIZES))
        if unknown:
            raise ValueError(f"model.tiny.sizes: unknown {unknown}; known: {sorted(DEFAULT_SIZES)}")
        return value


def refuse_hub_id(path: str | None, field: str) -> str | None:
    """`path` unchanged, unless it names no folder here and reads as a Hugging Face hub id ("org/name"):
    evr1 never downloads weights inside a stage, so that is refused now, with the command that fixes it."""
    if path is None or Path(path).exists() or path.startswith((".", "/", "~")) or "://" in path:
        return path
    parts = path.split("/")
    if len(parts) == 2 and all(parts):
        raise ValueError(f"{field} {path!r} is a Hugging Face hub id, not a model folder on this machine: download it "
                         f"first (`hf download {path} --local-dir /shared/models/{parts[1]}`) and set {field} to that folder")
    return path


class ModelConfig(Section):
    # A Hugging Face model directory (a hub id is refused: download it first, see `refuse_hub_id`). When
    # unset, a tiny random-weight model of `tiny.family` is built offline into the run folder.
    path: str | None = None
    tiny: TinyModelConfig | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: str = "sdpa"
    gradient_checkpointing: bool = False
    # Keep the vision tower's weights as loaded (EasyVideoR1's freeze_vision_tower): no gradients,
    # no optimizer state, and its features are computed without a graph.
    freeze_vision_tower: bool = False

    @model_validator(mode="after")
    def _has_model(self) -> "ModelConfig":
        if self.path is None and self.tiny is None:
            raise ValueError("model: set either model.path or model.tiny")
        refuse_hub_id(self.path, "model.path")
        return self


class RolloutConfig(Section):
    engine: Literal["hf", "vllm"] = "hf"
    n: int = Field(4, ge=1)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # 0 or -1 (EasyR1's spelling): no top-k
    # Strings that end a response, kept in it (e.g. ["</answer>"]): the reward reads the answer tag,
    # so text after it is unscored, and trained on it only adds noise to every step. Applies to
    # training rollouts and validation. [] (the reference's behaviour): responses end at eos.
    stop: list[str] = []
    batch_size: int = Field(8, ge=1)
    thinking: bool = False
    # Prompt template: a .jinja path or None for the built-in per-family templates.
    template: str | None = None


class AlgorithmConfig(Section):
    """Estimator, policy loss and KL (docs/rl.md has the formulas and an EasyR1/verl/TRL mapping).

    A `None` leaves the loss's own default: PPO clips 0.2/0.3, GSPO 3e-4/4e-4, CISPO caps the
    weight at 1 + 4.0 with no lower bound; the aggregation defaults per loss likewise.
    """

    adv_estimator: Literal["grpo", "rloo", "remax", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gdpo"] = "grpo"
    std: Literal["sample", "population", "none"] = "sample"
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    # GDPO normalises each of these reward components per group before summing them.
    gdpo_reward_keys: list[str] = ["accuracy", "format"]
    policy_loss: Literal["ppo", "gspo", "cispo", "sapo"] = "ppo"
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_dual: float | None = 3.0
    tau_positive: float | None = None
    # Mixed offline-online: the share of samples with an offline trajectory whose n-th response is
    # that trajectory (data.offline_key names the field). 0 turns the mode off.
    offline_ratio: float = Field(0.0, ge=0.0, le=1.0)
    tau_negative: float | None = None
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] | None = None
    loss_scale_factor: float | None = None
    use_kl_loss: bool = True
    kl_loss_coef: float = Field(0.01, ge=0.0)
    kl_penalty: Literal["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"] = "low_var_kl"
    # KL in the reward (token rewards = score − β·KL(old, ref)), β fixed or adapted towards kl_target.
    use_kl_in_reward: bool = False
    kl_reward_penalty: Literal["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"] = "k1"
    kl_coef: float = Field(0.001, ge=0.0)
    kl_type: Literal["fixed", "adaptive"] = "fixed"
    kl_target: float = Field(0.1, gt=0.0)
    kl_horizon: float = Field(10000.0, gt=0.0)
    entropy_coeff: float = 0.0
    # The policy gradient on the top share of response tokens by entropy only, within each micro-batch
    # (Wang et al. 2025, "Beyond the 80/20 rule"; 0.2 there); 1: every token. KL and entropy terms keep all.
    top_entropy_ratio: float = Field(1.0, gt=0.0, le=1.0)
    # DAPO dynamic sampling: drop groups that teach nothing and draw more prompts to refill the batch.
    dynamic_sampling: bool = False
    filter_rule: Literal["std", "mean_range"] = "std"
    filter_key: str = "overall"
    filter_low: float = 0.01
    filter_high: float = 0.99
    max_sample_batches: int = Field(4, ge=1)
    # DAPO overlong shaping: 0 off; else responses within the last `buffer` tokens lose up to the factor.
    overlong_buffer_len: int = Field(0, ge=0)
    overlong_penalty_factor: float = Field(1.0, ge=0.0)

    def loss_options(self) -> dict:
        """The options that belong to the chosen policy loss (others would be rejected by evr1.rl)."""
        keys = {"ppo": ("clip_ratio_low", "clip_ratio_high", "clip_ratio_dual"),
                "gspo": ("clip_ratio_low", "clip_ratio_high"),
                "cispo": ("clip_ratio_low", "clip_ratio_high"),
                "sapo": ("tau_positive", "tau_negative")}[self.policy_loss]
        out = {k: getattr(self, k) for k in keys if getattr(self, k) is not None or k == "clip_ratio_dual"}
        if self.loss_agg_mode is not None:
            out["loss_agg_mode"] = self.loss_agg_mode
        if self.loss_scale_factor is not None:
            out["loss_scale_factor"] = self.loss_scale_factor
        return out

    def estimator_options(self) -> dict:
        return {"grpo": {"std": self.std}, "gdpo": {"std": self.std},
                "reinforce_plus_plus": {"gamma": self.gamma}}.get(self.adv_estimator, {})


class RewardConfig(Section):
    accuracy_weight: float = Field(0.9, ge=0.0, le=1.0)
    format_weight: float = Field(0.1, ge=0.0, le=1.0)
    # User-defined task families: "path/to/file.py:function" references whose files `@register`
    # their families (docs/rewards.md); loaded before ingestion, so their problem types are known.
    families: list[str] = []
    workers: int = Field(0, ge=0)
    timeout_s: float = Field(10.0, gt=0.0)
    # Code rewards run model-written programs under bubblewrap; without it they refuse, unless this
    # is set (then the program runs in a plain subprocess: only for trusted data on a throwaway machine).
    allow_unsandboxed_code: bool = False

    @model_validator(mode="after")
    def _weights(self) -> "RewardConfig":
        if abs(self.accuracy_weight + self.format_weight - 1.0) > 1e-9:
            raise ValueError(
                f"reward: accuracy_weight + format_weight must be 1 (got {self.accuracy_weight} + {self.format_weight})"
            )
        return self


class TrainerConfig(Section):
    steps: int = Field(4, ge=1)
    prompts_per_step: int = Field(2, ge=1)
    micro_batch_size: int = Field(4, ge=1)
    ppo_epochs: int = Field(1, ge=1)
    # Responses per optimizer step over all ranks (EasyR1's global batch); None: one step per epoch.
    mini_batch_size: int | None = Field(None, ge=1)
    # How long a rank waits in a collective for a peer before failing (instead of hanging).
    collective_timeout_s: float = Field(600.0, gt=0.0)
    lr: float = Field(1e-5, gt=0.0)
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0.0)
    lr_warmup_steps: int = Field(0, ge=0)
    lr_schedule: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    # Greedy validation on the held-out split every N steps (0: never), logged as val/* metrics.
    val_every: int = Field(0, ge=0)
    val_limit: int = Field(64, ge=1)
    # FSDP2 ranks, one Ray actor each (gloo on CPU, NCCL on GPU).
    world_size: int = Field(1, ge=1)
    # Supervised steps on "<answer>{ground truth}</answer>" before RL: a cold start that teaches the
    # answer format, so rewards vary from the first RL step. 0 (the default) skips it; a resumed run
    # never repeats it.
    warmup_sft_steps: int = Field(0, ge=0)
    warmup_lr: float | None = Field(None, gt=0.0)  # None: trainer.lr
    # What the warm-up puts in the tag (evr1/train/warmup.py): the ground truth, or an answer drawn
    # uniformly from each item's valid answers, so the warm-up teaches the format and no answers.
    warmup_answers: Literal["ground_truth", "answer_space"] = "ground_truth"
    # The warm-up leaves the vision tower as it is (only the decoder learns the format).
    warmup_keeps_vision: bool = True
    # Prompts each worker reads and prepares ahead, in the background, while the current step runs
    # (rollout: the next step's; policy ranks: the current step's, during generation). 0: none.
    prefetch_prompts: int = Field(64, ge=0)
    # Log-prob passes and the update run each prompt once with its n responses on top of its cached
    # keys/values (equal to the unshared passes within float rounding). The update stays unshared
    # under model.gradient_checkpointing, which drops that cache under grad. Groups form inside a
    # micro-batch: micro_batch_size a multiple of rollout.n shares fully; 1 turns sharing off.
    share_prompt_prefix: bool = True
    # Passes over packed sequences with per-sequence positions (no padding), where the model family
    # supports it (Qwen2-VL, Qwen2.5-VL, Qwen3-VL; Qwen3.5's linear-attention layers stay padded).
    padding_free: bool = True
    # Micro-batches cut by tokens (prompt + response) instead of micro_batch_size responses; every rank
    # runs the same number of passes. None: micro_batch_size responses per micro-batch.
    max_tokens_per_micro_batch: int | None = Field(None, ge=1)
    # With model.freeze_vision_tower: each prompt's vision features are computed once per step and
    # reused by the old, reference and update passes (the policy's and the reference's towers are
    # then the same base weights). No effect on an unfrozen tower or under sequence parallelism.
    reuse_vision_features: bool = True
    # Ulysses sequence parallelism: each sequence's tokens split over this many ranks (heads
    # exchanged with all-to-all in attention). Must divide world_size; 1: off.
    sequence_parallel: int = Field(1, ge=1)
    # A table of a few prompts with their responses, rewards and advantages every N steps
    # (an MLflow table artifact; a Prefect table artifact when run by the flow). 0: never.
    log_rollouts_every: int = Field(1, ge=0)
    rollout_table_rows: int = Field(8, ge=1)
    device: Literal["cpu", "cuda"] = "cpu"
    save_every: int = Field(0, ge=0)
    keep_last: int = Field(2, ge=1)
    resume: bool = True


class JudgeConfig(Section):
    """The LLM judge for open-ended items (a second pass after scoring; docs/eval.md)."""

    enabled: bool = False
    engine: Literal["hf", "vllm"] = "hf"
    model_path: str | None = None          # None: the evaluated model judges itself (smoke tests only)
    prompt: str | None = None              # a Jinja2 template (text or .jinja path); None: the built-in one
    # Room for a brief reason and the verdict; a thinking judge needs more (or enable_thinking: false below).
    max_new_tokens: int = Field(1024, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    batch_size: int = Field(8, ge=1)
    # Passed to the judge's chat template, e.g. {enable_thinking: false} for Qwen3.
    chat_template_kwargs: dict[str, Any] = {}


class EvalConfig(Section):
    enabled: bool = True
    # Registry names (`evr1 benchmarks` lists them); "heldout" is the run's own held-out split.
    benchmarks: list[str] = ["heldout"]
    # official: each benchmark's own rules (bugs fixed); easyvideor1: the reference project's scorer.
    profile: Literal["official", "easyvideor1"] = "official"
    # Folder of annotation files (e.g. ../shared/benchmarks/annotations); `files` overrides per benchmark.
    annotations_dir: str | None = None
    files: dict[str, str] = {}
    # Folder holding each benchmark's video root (Video-MME/, MVBench/, …); `video_roots` overrides per benchmark.
    data_dir: str | None = None
    video_roots: dict[str, str] = {}
    subtitles: bool = False
    # A Lance frames table holding the benchmarks' videos (`evr1 cache`); None: the run's own cache, if any.
    frames_uri: str | None = None
    # Prompt style of the model family: auto (from the model directory), qwen3 (Qwen3-VL, 3.5) or qwen25.
    family: Literal["auto", "qwen3", "qwen25"] = "auto"
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    stop: list[str] = []  # as rollout.stop: strings that end a response (kept in it)
    # vLLM only (Qwen3-VL's Instruct setting, and EasyVideoR1's scripts, use 1.5); the HF engine refuses it.
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    batch_size: int = Field(8, ge=1)
    concurrency: int = Field(4, ge=1)
    queue_size: int = Field(16, ge=1)
    # Data-parallel engine replicas (one per GPU, each a Ray actor off the flow's process) fed from the one
    # queue of the whole suite; tensor_parallel GPUs per replica (vLLM) for a model one GPU cannot hold.
    engines: int = Field(1, ge=1)
    tensor_parallel: int = Field(1, ge=1)
    timeout_s: float = Field(300.0, gt=0.0)
    thinking: bool = False
    limit: int | None = Field(None, ge=1)
    # Row of evr1.eval.reference to set results beside (e.g. "qwen3-vl-8b-instruct"); None: no comparison.
    reference_model: str | None = None
    judge: JudgeConfig = JudgeConfig()


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
        if a.offline_ratio > 0 and not self.data.offline_key:
            raise ValueError("algorithm: offline_ratio > 0 needs data.offline_key (the field holding the trajectories)")
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
        if a.use_kl_loss and a.use_kl_in_reward:
            raise ValueError("algorithm: use_kl_loss and use_kl_in_reward both apply a KL penalty; choose one")
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

    def run_dir(self) -> Path:
        return Path(self.run.root) / self.run.name

    def fingerprint(self, *sections: str) -> str:
        """A short hash of the named sections (all when none): a cache key for Prefect and the stages."""
        data = self.model_dump(mode="json")
        chosen = {k: data[k] for k in (sections or data.keys())}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]


def _format_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        elif isinstance(e.get("input"), dict):  # a cross-field rule: the message names the keys, not a section dump
            lines.append(f"{source}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"{source}: key '{key}': {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error naming its line (YAML
    itself says keys are unique; PyYAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} on line {line} (first on line {seen[key]})", key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` → (["a", "b", "c"], value); the value is read as YAML (numbers, lists, null)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected key.path=value")
    return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else ""


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each `a.b.c=value` in a nested dict (a copy); sections are created as needed."""
    data = json.loads(json.dumps(data))
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise ConfigError(f"override {text!r}: '{part}' is not a section")
            node = node[part]
        node[path[-1]] = value
    return data


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply overrides, validate; errors name the key and the file."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        reason = " ".join(str(e).split())
        raise ConfigError(f"{path}: cannot read config: {reason}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    data = _anchor_data_paths(data, Path(os.path.abspath(path)).parent)
    source = str(path) if not overrides else f"{path} (with overrides {' '.join(overrides)})"
    try:
        return Config.model_validate(apply_overrides(data, list(overrides)))
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def _anchor_data_paths(data: dict, folder: Path) -> dict:
    """Relative `data.train_files`, `data.eval_files` and `data.data_root` in a config file are read
    against the file's folder (where a user keeps them beside it), not the working directory;
    overrides on the command line stay as given."""
    section = data.get("data")
    if not isinstance(section, dict):
        return data

    def anchor(value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        given = Path(value).expanduser()
        return str(given if given.is_absolute() else folder / given)

    section = dict(section)
    for key in ("train_files", "eval_files"):
        if isinstance(section.get(key), list):
            section[key] = [anchor(v) for v in section[key]]
    if "data_root" in section:
        section["data_root"] = anchor(section["data_root"])
    return {**data, "data": section}


def config_from_dict(data: dict, source: str = "<dict>") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None


def flat_params(cfg: Config) -> dict[str, str]:
    """The config as flat `section.key` → string pairs, for MLflow params."""
    out: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = json.dumps(node) if not isinstance(node, str) else node

    walk("", cfg.model_dump(mode="json"))
    return out
