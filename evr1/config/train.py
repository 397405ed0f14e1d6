"""The sections that configure `evr1.train`: `rollout`, `algorithm`, `reward` and `trainer`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from evr1.config.base import Section


class VLLMConfig(Section):
    """vLLM's engine options, for training rollouts and for evaluation (`rollout.engine` / `eval`'s
    engine `vllm`; ignored by the HF engine). docs/vllm.md says what each does on GPU and on CPU."""

    # The longest prompt + response the engine admits. None: the model's full context (262,144 for
    # Qwen3-VL-8B), whose KV cache may not fit beside the model: on GPU, set it.
    max_model_len: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.6, gt=0.0, le=1.0)  # on CPU: the share of all RAM
    kv_cache_gib: float | None = Field(None, gt=0.0)  # the KV budget instead of a share of memory
    enforce_eager: bool = False  # no CUDA graphs: slower decoding, a faster start, less memory
    enable_prefix_caching: bool = True  # the n samples of a prompt share its prefill
    tensor_parallel_size: int = Field(1, ge=1)  # GPUs per engine (evaluation: eval.tensor_parallel when > 1)
    limit_mm_per_prompt: dict[str, int] = {}  # e.g. {video: 2, image: 4}; {}: vLLM's defaults
    # vLLM's cache of processed media (GiB). 0: off, as a rollout processes each prompt once per step and
    # one processed 64-frame 384×672 video (~190 MB of fp32 patches) would churn vLLM's default 4 GiB.
    mm_processor_cache_gb: float = Field(0.0, ge=0.0)
    sync_bucket_mb: float = Field(256.0, gt=0.0)  # weight hand-over in pieces of this size
    sync_dir: str | None = None  # where the pieces go (None: $EVR1_WEIGHT_SYNC_DIR, /dev/shm, the temp dir)
    # Which log-probs vLLM returns for the sampled tokens (what `rollout/logprob_gap_*` and the rollout
    # correction compare with the trainer's, taken at the sampling temperature). "auto": the raw
    # model's when rollout.temperature is 1 (measured equal to the trainer's within 4e-6 on CPU, fp32),
    # else the processed ones (after temperature; vLLM 0.32's sampler path shifts them by about
    # +0.005 on average even at temperature 1, so the gap reads high there).
    logprobs_mode: Literal["auto", "processed_logprobs", "raw_logprobs"] = "auto"

    def engine_options(self) -> dict[str, Any]:
        """The keywords `VLLMEngine.from_pretrained` takes (unset ones left to vLLM)."""
        out = self.model_dump()
        if not out["limit_mm_per_prompt"]:
            out.pop("limit_mm_per_prompt")
        return {k: v for k, v in out.items() if v is not None}


class RolloutCorrection(Section):
    """Importance correction of the rollout engine's numerics (or staleness): each token's advantage
    is weighted by π_old / π_rollout, truncated at `threshold` (TIS, Yao et al. 2025) or, with
    `mode: mask`, tokens (or sequences) above it dropped. Both engines return the sampled tokens'
    log-probs (vLLM's, HF's at the sampling temperature)."""

    enabled: bool = False
    level: Literal["token", "sequence"] = "token"
    mode: Literal["truncate", "mask"] = "truncate"
    threshold: float = Field(2.0, gt=1.0)


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
    # How training samples are seeded. per_prompt: each prompt's n samples from a seed of (run seed,
    # step, draw, the prompt), the same whatever engine, batch or placement generates them and after a
    # resume. engine: the engines' own generators, seeded once at start, so reproducible only for the
    # same placement and prompt order and not across a resume; in exchange vLLM samples without a
    # generator per request (vLLM 0.32 loops over seeded requests at every token and skips
    # FlashInfer's sampler for them). The HF engine batches `batch_size` prompts per call either way
    # (per prompt: a generator per sample row, evr1/engines/row_sampler.py).
    seeding: Literal["per_prompt", "engine"] = "per_prompt"
    thinking: bool = False
    # Prompt template: a .jinja path or None for the built-in per-family templates.
    template: str | None = None
    vllm: VLLMConfig = VLLMConfig()
    correction: RolloutCorrection = RolloutCorrection()
    # Where generation runs. colocated: an engine inside every policy rank, on the rank's own GPU,
    # generating that rank's share of the step's prompts and asleep while it trains (verl/EasyR1's
    # hybrid engine); separate: one rollout worker beside the ranks with a GPU of its own (CPU runs,
    # debugging). auto: colocated on `trainer.device: cuda`, separate on the CPU.
    placement: Literal["auto", "colocated", "separate"] = "auto"
    # What a colocated vLLM engine frees while its rank trains: 1 its KV cache (weights kept in host
    # memory), 2 weights too (every sync then sends every weight the engine holds). 0: never sleeps.
    sleep_level: int = Field(2, ge=0, le=2)
    # Where a process boundary is crossed (separate workers), weights travel in buckets of this size.
    sync_bucket_mb: int = Field(1024, ge=1)
    # Separate placement: how many rollout workers (each its own device); prompts are shared out
    # between them, all samples of a prompt on one, and every sync broadcasts to all of them.
    engines: int = Field(1, ge=1)
    # CPU runs: the cores the rollout workers run on (None: all); with trainer.cpus, generation and
    # training on cores of their own, so that asynchronous rollouts really overlap on one machine.
    cpus: list[int] | None = None

    def placement_for(self, device: str) -> str:
        """`placement` with auto resolved for `device`."""
        if self.placement != "auto":
            return self.placement
        return "colocated" if device == "cuda" else "separate"


class AlgorithmConfig(Section):
    """Estimator, policy loss and KL (docs/rl.md has the formulas and an EasyR1/verl/TRL mapping).

    A `None` leaves the loss's own default: PPO clips 0.2/0.3, GSPO 3e-4/4e-4, CISPO caps the
    weight at 1 + 4.0 with no lower bound; the aggregation defaults per loss likewise.
    """

    adv_estimator: Literal["grpo", "rloo", "remax", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gdpo",
                           "w_reinforce"] = "grpo"
    std: Literal["sample", "population", "none"] = "sample"
    # w_reinforce: the weight λ of a right answer's push up against a wrong one's push down of 1
    # (advantage λ·R − (1 − R), no baseline; 0.1 in Zhu et al. 2025).
    positive_weight: float = Field(0.1, ge=0.0)
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    # GDPO normalises each of these reward components per group before summing them.
    gdpo_reward_keys: list[str] = ["accuracy", "format"]
    policy_loss: Literal["ppo", "clip_cov", "gspo", "cispo", "sapo"] = "ppo"
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_dual: float | None = 3.0
    # Clip-Cov (policy_loss: clip_cov): the share of valid tokens, drawn at random among those whose
    # covariance (A − mean A)·(log π − mean log π) lies in (clip_cov_lb, clip_cov_ub), whose gradient is
    # removed (verl's defaults). Acts on-policy too (docs/rl.md).
    clip_cov_ratio: float = Field(2e-4, ge=0.0, le=1.0)
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
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
    # The tokens the entropy bonus covers: every response token (with the loss's aggregation), or the
    # answer's content, the tokens inside the response's last <answer>...</answer> as the reward reads
    # it, any answer length: their entropies summed per response (the answer's entropy as a whole),
    # the mean over the responses with a complete tag (the others get no bonus).
    entropy_on: Literal["response", "answer"] = "response"
    # An entropy floor: with a target, `entropy_coeff` is where a coefficient starts that moves by
    # `entropy_coeff_delta` a step, up while the covered tokens' entropy is below the target and down
    # once it is above, within [0, entropy_coeff_max], and is 0 while above (Skywork-OR1's adaptive
    # entropy control; evr1.rl.AdaptiveEntropyCoefficient). None: the coefficient stays fixed.
    entropy_target: float | None = Field(None, gt=0.0)
    entropy_coeff_delta: float = Field(0.002, gt=0.0)
    entropy_coeff_max: float = Field(0.05, ge=0.0)
    # A floor per value of a sample field (`family`: the task family; else a field every sample has):
    # one coefficient per value, each adapted to its own responses' answer entropy (needs
    # entropy_on: answer and a target; evr1.train.entropy_bonus). None: one coefficient for the batch.
    entropy_target_by: str | None = None
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

    @model_validator(mode="after")
    def _clip_cov_band(self) -> AlgorithmConfig:
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(f"algorithm: clip_cov_lb ({self.clip_cov_lb}) must be below clip_cov_ub ({self.clip_cov_ub})")
        if self.entropy_target is not None and not 0.0 <= self.entropy_coeff <= self.entropy_coeff_max:
            raise ValueError(f"algorithm: entropy_coeff ({self.entropy_coeff}) is where the adaptive coefficient "
                             f"starts and must lie in [0, entropy_coeff_max={self.entropy_coeff_max}]")
        if self.entropy_target_by is not None and (self.entropy_target is None or self.entropy_on != "answer"):
            raise ValueError(f"algorithm: entropy_target_by ({self.entropy_target_by!r}) holds a floor on each value's "
                             f"answer entropy: it needs entropy_target and entropy_on: answer (got entropy_target="
                             f"{self.entropy_target}, entropy_on={self.entropy_on!r})")
        return self

    def loss_options(self) -> dict:
        """The options that belong to the chosen policy loss (others would be rejected by evr1.rl)."""
        keys = {"ppo": ("clip_ratio_low", "clip_ratio_high", "clip_ratio_dual"),
                "clip_cov": ("clip_ratio_low", "clip_ratio_high", "clip_ratio_dual", "clip_cov_ratio", "clip_cov_lb",
                             "clip_cov_ub"),
                "gspo": ("clip_ratio_low", "clip_ratio_high"),
                "cispo": ("clip_ratio_low", "clip_ratio_high"),
                "sapo": ("tau_positive", "tau_negative")}[self.policy_loss]
        out = {k: getattr(self, k) for k in keys if getattr(self, k) is not None or k == "clip_ratio_dual"}
        if self.loss_agg_mode is not None:
            out["loss_agg_mode"] = self.loss_agg_mode
        if self.loss_scale_factor is not None:
            out["loss_scale_factor"] = self.loss_scale_factor
        return out

    @property
    def needs_reference(self) -> bool:
        """Whether the update needs the reference policy's log-probs (a KL loss or KL in the reward)."""
        return (self.use_kl_loss and self.kl_loss_coef > 0) or self.use_kl_in_reward

    def estimator_options(self) -> dict:
        return {"grpo": {"std": self.std}, "gdpo": {"std": self.std},
                "reinforce_plus_plus": {"gamma": self.gamma},
                "w_reinforce": {"positive_weight": self.positive_weight}}.get(self.adv_estimator, {})


def off_policy_reasons(algorithm: AlgorithmConfig, rollout: RolloutConfig, trainer: TrainerConfig) -> list[str]:
    """Why the update's "old" log-probs may differ from its own, detached ones (empty: strictly on-policy).

    Old log-probs are the policy's before the update. They equal the update's own only when every
    token is trained once, in one optimizer step, on the policy that just generated it, and nothing
    needs them before the update starts.
    """
    reasons = []
    if trainer.ppo_epochs > 1:
        reasons.append(f"trainer.ppo_epochs is {trainer.ppo_epochs} (later epochs update a policy that has moved)")
    batch = trainer.prompts_per_step * rollout.n
    if trainer.mini_batch_size is not None and trainer.mini_batch_size < batch:
        reasons.append(f"trainer.mini_batch_size {trainer.mini_batch_size} < prompts_per_step × rollout.n = {batch} "
                       "(several optimizer steps per batch)")
    if trainer.staleness > 0:
        reasons.append(f"trainer.mode is {trainer.mode} (generation runs ahead of the trained policy)")
    if rollout.correction.enabled:
        reasons.append("rollout.correction is enabled (its weights π_old / π_rollout are computed before the update)")
    if algorithm.use_kl_in_reward:
        reasons.append("algorithm.use_kl_in_reward is true (the rewards take KL(old, ref) before the update)")
    return reasons


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
    # Code samples whose tests a policy could forge a pass for (evr1.rewards.classify_tests: e.g. a
    # check() program with no entry_point, tests that use no name the answer defines) are rejected at
    # ingestion, and the code reward refuses to score them; true keeps and scores them (warned, counted).
    allow_unjudgeable_tests: bool = False

    @model_validator(mode="after")
    def _weights(self) -> "RewardConfig":
        if abs(self.accuracy_weight + self.format_weight - 1.0) > 1e-9:
            raise ValueError(
                f"reward: accuracy_weight + format_weight must be 1 (got {self.accuracy_weight} + {self.format_weight})"
            )
        return self

    # Temporal grounding's training reward: iou (its accuracy) or tiou_distance (Time-R1's IoU times
    # penalties on the start and end distances over the clip's duration; docs/rewards.md). Training
    # only: `accuracy`, validation and the held-out metric stay plain IoU.
    grounding: Literal["iou", "tiou_distance"] = "iou"

    def shaping(self) -> dict[str, str]:
        """The `shaping` argument of `evr1.rewards.compute_scores` these options ask for."""
        return {} if self.grounding == "iou" else {"temporal grounding": self.grounding}


class TrainerConfig(Section):
    steps: int = Field(4, ge=1)
    # synchronous: generate, then train (the engines idle while the ranks train, and the other way
    # round). one_step_off: the next step's batch is generated, by the policy one version behind,
    # while this one trains (verl's recipe). bounded: generation runs up to `max_staleness` versions
    # ahead. Both need separate rollout workers (rollout.placement: separate); correct the staleness
    # with rollout.correction (importance weights from the engines' log-probs).
    mode: Literal["synchronous", "one_step_off", "bounded"] = "synchronous"
    max_staleness: int = Field(1, ge=0)  # bounded mode's bound (0: synchronous)
    cpus: list[int] | None = None  # CPU runs: the cores the policy ranks run on (None: all); see rollout.cpus

    @property
    def staleness(self) -> int:
        """How many versions generation may run ahead: 0 synchronous, 1 one_step_off, max_staleness bounded."""
        return {"synchronous": 0, "one_step_off": 1}.get(self.mode, self.max_staleness)
    prompts_per_step: int = Field(2, ge=1)
    micro_batch_size: int = Field(4, ge=1)
    ppo_epochs: int = Field(1, ge=1)
    # The "old" log-prob pass before the update. On a strictly on-policy update (one mini-batch, one
    # epoch, synchronous, no rollout correction, no KL in the reward: `off_policy_reasons`) the old
    # log-probs are the update's own, detached, so the pass is skipped and the update uses those.
    # auto: skip exactly then; true: skip, and a config that is not strictly on-policy is an error; false: never.
    skip_old_log_probs: Literal["auto"] | bool = "auto"
    # Responses per optimizer step over all ranks (EasyR1's global batch); None: one step per epoch.
    mini_batch_size: int | None = Field(None, ge=1)
    # How long a rank waits in a collective for a peer before failing (instead of hanging).
    collective_timeout_s: float = Field(600.0, gt=0.0)
    lr: float = Field(1e-5, gt=0.0)
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0.0)
    lr_warmup_steps: int = Field(0, ge=0)
    lr_schedule: Literal["constant", "cosine", "step"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)  # cosine: the floor, × lr
    # step: lr × lr_gamma^k after the k-th of these RL steps (absolute, so a continued run keeps them);
    # e.g. [450] and 0.3 for a third of the rate from step 451 (docs/learning.md: what broke a run at 1e-3).
    lr_milestones: list[int] = Field(default_factory=list)
    lr_gamma: float = Field(0.1, gt=0.0, le=1.0)
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
    # Log-probs and entropy from the final hidden states, the output head applied this many valid
    # response tokens at a time (no [tokens, vocabulary] fp32 logits: a chunk is 4 B × this × V, about
    # two alive at once). None: the full logits of every response position (the previous path).
    logits_chunk_tokens: int | None = Field(2048, ge=1)
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
    # Start from another run's checkpoint (a `step_N` folder, or its `checkpoints/<fingerprint>` folder
    # for the newest): weights, optimizer, data position, step and reference, then train on with this
    # config to `steps` (to rewind before a loss spike and go on with a lower lr, or fork a setting).
    # The path is part of the checkpoint fingerprint; once the fork has saved, it resumes from its own.
    init_from: str | None = None

    @model_validator(mode="after")
    def _step_schedule(self) -> "TrainerConfig":
        if self.lr_schedule == "step" and not self.lr_milestones:
            raise ValueError("trainer.lr_schedule=step needs trainer.lr_milestones (the RL steps after which lr × lr_gamma)")
        if sorted(set(self.lr_milestones)) != list(self.lr_milestones) or any(m < 1 for m in self.lr_milestones):
            raise ValueError(f"trainer.lr_milestones={self.lr_milestones}: expected increasing RL steps ≥ 1")
        return self
