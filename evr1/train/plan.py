"""A memory plan for one training rank: tokens per sample, parameter and activation bytes per GPU.

`evr1 plan conf/long_video.yaml` answers "does this config fit, and what does sequence parallelism
buy?" before a GPU is rented. Every figure is a formula of the model's shapes (read from the model
folder's config.json, or a built-in table of known checkpoints when the folder is not on this
machine), the frames and pixel budget of `cache`, and the trainer's world size, sequence-parallel
size, dtype and gradient checkpointing. Formulas (bytes; b = compute dtype bytes; L tokens per rank):

- parameters, gradients, Adam: float32 at rest, sharded by FSDP over the world (evr1/train/workers/precision.py):
  4·N + 4·N + 8·N, divided by world_size; plus the gathered compute copies of about two decoder
  layers (the one running and the one prefetched), b bytes per parameter. A reference model (KL loss)
  adds its sharded weights, b bytes per parameter (bf16 under mixed precision, float32 otherwise).
- decoder activations per token per layer (what autograd saves in transformers' Qwen layers with
  sdpa/flash attention, no L² score matrix): b·(ACT_H·h + ACT_I·i + ACT_KV·kv) with h the hidden size,
  i the MLP width, kv the key/value width; under gradient checkpointing only the layer input (b·h)
  is kept per layer, plus one layer's full activations while it is recomputed. Tokens per rank are
  L = sequence / sp. The backward adds the gradients inside the layer it is in: b·(2h + 2i) per
  token. A frozen tower's forward and the recomputes happen at different times: the
  "one layer at a time" row is what the largest of them adds on top of the saved activations.
- logits: with `trainer.logits_chunk_tokens` = c (the default path, `models/runtime.py`
  `chunked_token_log_probs`), two float32 [c, V] blocks alive at once, forward or backward:
  8·min(c, R)·V, plus the R response positions' hidden states (kept for the recomputing backward,
  b·h each, twice: the head's input and its gathered rows). Without it (c None), the full logits of
  the R response positions, b + 12 bytes per vocabulary entry (the logits, their float32 copy, the
  tempered copy and the softmax for the entropy). The response is at the sequence's end, so one rank
  may hold all of it: R = min(responses in the micro-batch, sequence / sp) positions.
- the micro-batch: `trainer.max_tokens_per_micro_batch` (a token budget) holds as many samples of the
  planned shape as fit in it (at least one: a longer sample gets a micro-batch of its own); without
  a budget, `trainer.micro_batch_size` samples.
- FSDP2's root unit (embeddings, output head, final norm and the vision tower: every parameter not in
  a decoder layer, evr1/train/workers/sharded_load.py `shard_model`) is gathered in the compute dtype
  at the first forward and stays gathered through the forward and the backward (b bytes per
  parameter), and the output head's gradient (b·V·h) is alive through the whole backward; counted
  when FSDP2 gathers at all (world size > 1, or a compute dtype other than float32).
- the rollout engine, when it shares the GPU (colocated): `rollout.vllm.gpu_memory_utilization` of the
  GPU (or its `kv_cache_gib` plus its bf16 weights), held by vLLM whatever the trainer does.
- vision tower: per patch per block the same shape with its own widths, not divided by sp (every
  rank of a group runs the whole tower, evr1/train/workers/sequence_parallel.py); 0 saved when frozen.
- the full-sequence input embeddings that each rank builds before slicing: b·h per token; with sp > 1
  also their gradient (b·h per token) and the all-to-all's copies (4 local b·h tensors).

The formulas are checked against the allocator's measured peak on tiny models (tests/train/test_plan.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evr1.models.families import FAMILIES, Family, family_of
from evr1.train.placement import plan_resources
from evr1.video.sampling import smart_resize, video_pixel_budget

# Elements saved per token per decoder layer, by width (module docstring): two RMSNorms (input, f32
# normalised, output: 3·h each), the projections' input (shared), attention's q and output, o_proj's
# input (h each) → 9·h; keys and values → 2·kv; SwiGLU's gate, up, activation, product → 4·i.
ACT_H, ACT_I, ACT_KV = 9, 4, 2
# Gradients alive inside the layer being differentiated (measured on the allocator's peak): the
# residual stream's and the MLP's (the gradients of the SwiGLU product and of its gate).
BWD_H, BWD_I = 2, 2
LOGIT_EXTRA_BYTES = 12
GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
RESERVE = 0.10  # share of GPU memory kept free for the CUDA context, allocator fragmentation, NCCL buffers

# Checkpoints the plan knows without their folder: config kwargs for transformers' config classes.
KNOWN_MODELS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "Qwen2-VL-7B-Instruct": ("qwen2_vl", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, vocab_size=152064),
                             dict(depth=32, embed_dim=1280, mlp_ratio=4, num_heads=16, hidden_size=3584)),
    "Qwen2.5-VL-7B-Instruct": ("qwen2_5_vl", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                               num_attention_heads=28, num_key_value_heads=4, vocab_size=152064),
                               dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                                    out_hidden_size=3584)),
    "Qwen3-VL-8B-Instruct": ("qwen3_vl", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936),
                             dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                                  out_hidden_size=4096, deepstack_visual_indexes=[8, 16, 24])),
}


@dataclass(frozen=True)
class Arch:
    """The shapes memory depends on."""

    family: Family
    hidden: int
    intermediate: int
    layers: int
    kv_width: int  # key/value heads × head dim
    vocab: int
    vision_hidden: int
    vision_intermediate: int
    vision_depth: int
    text_params: int
    vision_params: int
    layer_params: int  # one decoder layer

    @property
    def params(self) -> int:
        return self.text_params + self.vision_params

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: FSDP2's root unit (embeddings, head, norm, vision tower)."""
        return self.params - self.layers * self.layer_params


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def arch_from_config(config: Any) -> Arch:
    """`Arch` of a transformers Qwen-VL config: shapes from it, parameter counts from a meta-device model."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    t, v = config.text_config, config.vision_config
    head_dim = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    v_hidden = getattr(v, "embed_dim", None) or v.hidden_size
    v_inter = getattr(v, "intermediate_size", None) or int(v_hidden * getattr(v, "mlp_ratio", 4))
    visual = model.model.visual
    return Arch(
        family=family_of(config.to_dict()), hidden=t.hidden_size, intermediate=t.intermediate_size,
        layers=t.num_hidden_layers, kv_width=t.num_key_value_heads * head_dim, vocab=t.vocab_size,
        vision_hidden=v_hidden, vision_intermediate=v_inter, vision_depth=v.depth,
        text_params=_count(model) - _count(visual), vision_params=_count(visual),
        layer_params=_count(model.model.language_model.layers[0]),
    )


def load_arch(model_path: str | None, tiny_family: str | None = None) -> Arch:
    """The model's `Arch`: its folder's config.json when present, else a `KNOWN_MODELS` entry named by the
    folder's last part, else (no path) the tiny model of `tiny_family`."""
    import transformers
    from transformers import AutoConfig

    if model_path and (Path(model_path) / "config.json").exists():
        return arch_from_config(AutoConfig.from_pretrained(model_path))
    if model_path:
        name = Path(model_path).name
        if name not in KNOWN_MODELS:
            raise ValueError(f"plan: {model_path} has no config.json here and {name!r} is not a known model "
                             f"({', '.join(KNOWN_MODELS)}); copy its config.json there or pass --model")
        family, text, vision = KNOWN_MODELS[name]
        cls = getattr(transformers, FAMILIES[family].config_class)
        return arch_from_config(cls(text_config=text, vision_config=vision, tie_word_embeddings=False))
    import tempfile

    from evr1.models.tiny import make_tiny

    with tempfile.TemporaryDirectory() as tmp:
        return arch_from_config(AutoConfig.from_pretrained(make_tiny(tiny_family or "qwen3_vl", tmp)))


@dataclass(frozen=True)
class Tokens:
    """One sample's sequence: vision tokens of its video, text around it, the response."""

    frames: int
    height: int
    width: int
    video: int
    text: int
    response: int

    @property
    def total(self) -> int:
        return self.video + self.text + self.response

    merge: int = 2  # the family's spatial merge size

    @property
    def patches(self) -> int:
        """Vision-tower tokens (before the spatial merge)."""
        return self.video * self.merge**2


def video_tokens(family: Family, frames: int, source_hw: tuple[int, int], *, min_pixels: int | None,
                 max_pixels: int | None, total_pixels: int | None, rules: str) -> tuple[int, int, int]:
    """(tokens, height, width) of a video of `frames` sampled frames of `source_hw`, by the family's
    resize rules and pixel budget (the frame cache's own functions)."""
    lo, hi = video_pixel_budget(frames, factor=family.factor, min_pixels=min_pixels, max_pixels=max_pixels,
                                total_pixels=total_pixels, rules=rules)
    h, w = smart_resize(*source_hw, factor=family.factor, min_pixels=lo, max_pixels=hi)
    groups = math.ceil(frames / family.temporal_patch_size)
    return groups * (h // family.factor) * (w // family.factor), h, w


def sample_tokens(arch: Arch, frames: int, source_hw: tuple[int, int], *, min_pixels: int | None,
                  max_pixels: int | None, total_pixels: int | None, rules: str, prompt_text: int,
                  response: int) -> Tokens:
    video, h, w = video_tokens(arch.family, frames, source_hw, min_pixels=min_pixels, max_pixels=max_pixels,
                               total_pixels=total_pixels, rules=rules)
    groups = math.ceil(frames / arch.family.temporal_patch_size)
    # vision start/end; Qwen3-VL's "<t.t seconds>" text before each temporal group (about 6 tokens)
    around = 2 + (groups * 8 if arch.family.timestamps else 0)
    return Tokens(frames, h, w, video, prompt_text + around, response, arch.family.merge_size)


@dataclass(frozen=True)
class Setup:
    """How the rank trains."""

    world_size: int
    sp: int
    dtype: str
    checkpointing: bool
    micro_batch: int = 1
    frozen_vision: bool = False
    reference_model: bool = False
    max_tokens: int | None = None  # trainer.max_tokens_per_micro_batch: the micro-batch by tokens
    logits_chunk: int | None = None  # trainer.logits_chunk_tokens; None: full logits
    rollout_bytes: int = 0  # a colocated rollout engine's share of the GPU
    # The colocated engine sleeps while the rank trains (rollout.sleep_level ≥ 1): its share and the
    # training activations are never held together, so only its excess over the activations counts.
    engine_sleeps: bool = False

    def samples(self, tokens: Tokens) -> int:
        """Samples of the planned shape in one micro-batch (module docstring)."""
        if self.max_tokens is not None:
            return max(1, self.max_tokens // tokens.total)
        return self.micro_batch


def _layer_act(bytes_: int, h: int, i: int, kv: int) -> int:
    return bytes_ * (ACT_H * h + ACT_I * i + ACT_KV * kv)


def memory(arch: Arch, tokens: Tokens, s: Setup) -> dict[str, int]:
    """Bytes per rank, by component (module docstring)."""
    b = DTYPE_BYTES[s.dtype]
    n, w = arch.params, s.world_size
    samples = s.samples(tokens)
    seq = tokens.total * samples
    local = math.ceil(seq / s.sp)
    per_layer = local * _layer_act(b, arch.hidden, arch.intermediate, arch.kv_width)
    patches = tokens.patches * samples
    v_layer = patches * _layer_act(b, arch.vision_hidden, arch.vision_intermediate, arch.vision_hidden)
    # saved for the backward: everything, or (checkpointing) each layer's input only
    decoder = local * arch.layers * b * arch.hidden if s.checkpointing else arch.layers * per_layer
    if s.frozen_vision:
        vision = 0
    else:
        vision = patches * arch.vision_depth * b * arch.vision_hidden if s.checkpointing else arch.vision_depth * v_layer
    # One layer's activations at a time, in three phases that never overlap: a frozen tower's forward
    # (before the decoder saves anything), the decoder's backward (a layer recomputed on top of everything
    # saved), the tower's backward (a block recomputed once the decoder's activations are freed).
    backward = local * b * (BWD_H * arch.hidden + BWD_I * arch.intermediate)  # gradients inside the layer
    phases = (v_layer if s.frozen_vision else 0,
              decoder + vision + backward + (per_layer if s.checkpointing else 0),
              vision + (v_layer if s.checkpointing and not s.frozen_vision else 0))
    transient = max(phases) - decoder - vision
    response = min(tokens.response * samples, local)
    trainable = n - (arch.vision_params if s.frozen_vision else 0)
    if s.logits_chunk is None:
        logits = response * arch.vocab * (b + LOGIT_EXTRA_BYTES)
    else:
        logits = 8 * min(s.logits_chunk, response) * arch.vocab + 2 * response * b * arch.hidden
    root = arch.root_params
    gathers = w > 1 or b != 4
    out = {
        "parameters (fp32, sharded)": 4 * n // w,
        "gradients (fp32, sharded)": 4 * trainable // w,
        "Adam states (fp32, sharded)": 8 * trainable // w,
        "gathered layers (compute dtype)": 2 * b * arch.layer_params if w > 1 else 0,
        # stored in the compute dtype under mixed precision (`Precision.reference`), float32 otherwise
        "reference model (sharded)": b * n // w if s.reference_model else 0,
        "decoder activations": decoder,
        "input embeddings (full sequence)": seq * b * arch.hidden,
        # sp > 1: the all-to-all's copies of q, k, v and the output (local), and the full sequence's
        # embedding gradient that the slice's backward fills
        "sequence-parallel exchange buffers": (4 * local + seq) * b * arch.hidden if s.sp > 1 else 0,
        "FSDP2 root unit (gathered, head gradient)": b * (root + arch.vocab * arch.hidden) if gathers else 0,
        "logits (response positions)": logits,
        "vision tower activations": vision,
        "one layer at a time (recompute, frozen tower)": max(transient, 0),
        "rollout engine (colocated)": s.rollout_bytes,
    }
    if s.engine_sleeps:
        activations = sum(v for k, v in out.items() if k not in STATIC)
        out["rollout engine (colocated)"] = max(0, s.rollout_bytes - activations)
    return out


STATIC = ("parameters (fp32, sharded)", "gradients (fp32, sharded)", "Adam states (fp32, sharded)",
          "gathered layers (compute dtype)", "reference model (sharded)", "FSDP2 root unit (gathered, head gradient)",
          "rollout engine (colocated)")


def fits(total: int, gpu_gib: float) -> bool:
    return total <= gpu_gib * GIB * (1 - RESERVE)


def plan_table(arch: Arch, tokens: Tokens, setups: dict[str, Setup], gpu_gib: float) -> str:
    """A readable table: one column per setup, one row per component, a total, and a fits line each."""
    mems = {name: memory(arch, tokens, s) for name, s in setups.items()}
    keys = list(next(iter(mems.values())))
    width = max(len(k) for k in keys) + 2
    head = "component".ljust(width) + "".join(name.rjust(22) for name in setups)
    lines = [
        f"model: {arch.family.name}, {arch.params / 1e9:.2f} B parameters ({arch.vision_params / 1e9:.2f} B vision), "
        f"{arch.layers} layers, hidden {arch.hidden}",
        f"sample: {tokens.frames} frames at {tokens.height}x{tokens.width} → {tokens.video:,} video tokens + "
        f"{tokens.text:,} text + {tokens.response:,} response = {tokens.total:,} tokens "
        f"({tokens.patches:,} vision-tower patches)",
    ]
    first = next(iter(setups.values()))
    k = first.samples(tokens)
    lines.append(f"micro-batch: {k} sample{'s' if k > 1 else ''} = {k * tokens.total:,} tokens ("
                 + (f"token budget {first.max_tokens:,}" if first.max_tokens else f"micro_batch_size {first.micro_batch}")
                 + "); logits " + (f"in chunks of {first.logits_chunk:,} response tokens" if first.logits_chunk
                                   else "of every response position at once"))
    lines += ["", head, "-" * len(head)]
    for k in keys:
        lines.append(k.ljust(width) + "".join(f"{mems[n][k] / GIB:19.2f} GiB" for n in setups))
    totals = {n: sum(m.values()) for n, m in mems.items()}
    lines += ["-" * len(head), "total per GPU".ljust(width) + "".join(f"{totals[n] / GIB:19.2f} GiB" for n in setups),
              ""]
    for n, t in totals.items():
        verdict = "fits" if fits(t, gpu_gib) else "does NOT fit"
        lines.append(f"{n}: {t / GIB:.1f} GiB {verdict} in {gpu_gib:g} GiB (keeping {RESERVE:.0%} free)")
    return "\n".join(lines)


def rollout_share_bytes(cfg: Any, arch: Arch, gpu_gib: float) -> int:
    """What a rollout engine sharing the GPU holds: vLLM's `kv_cache_gib` plus its bf16 weights when set,
    else its `gpu_memory_utilization` of the GPU (the HF engine: its weights in the load dtype)."""
    if cfg.rollout.engine != "vllm":
        from evr1.models.runtime import configured_dtype

        return DTYPE_BYTES[configured_dtype(cfg.model, cfg.trainer.device)] * arch.params
    v = cfg.rollout.vllm
    if v.kv_cache_gib is not None:
        return int(v.kv_cache_gib * GIB) + 2 * arch.params
    return int(v.gpu_memory_utilization * gpu_gib * GIB)


def plan_for_config(cfg: Any, *, gpu_gib: float = 80.0, world_size: int | None = None,
                    source_hw: tuple[int, int] = (720, 1280), prompt_text: int = 128,
                    colocated: bool | None = None) -> str:
    """The plan of an evr1 `Config`: frames = cache.nframes or cache.max_frames (a video long enough to reach
    it), frames of `source_hw` resized by the cache's pixel budget, response = rollout.max_new_tokens; the
    micro-batch by `trainer.max_tokens_per_micro_batch` (else micro_batch_size), the logits by
    `trainer.logits_chunk_tokens`. `colocated`: the rollout engine shares each training GPU (None: the
    config's `rollout.placement` resolved for `trainer.device`). Ends with the Ray placement of the
    ranks and the rollout worker (evr1/train/placement.py `plan_resources`, no Ray needed)."""
    tiny = cfg.model.tiny.family if cfg.model.tiny else None
    arch = load_arch(cfg.model.path, tiny)
    c = cfg.cache
    frames = c.nframes or c.max_frames
    frames += frames % 2
    tokens = sample_tokens(arch, frames, source_hw, min_pixels=c.min_pixels, max_pixels=c.max_pixels,
                           total_pixels=c.total_pixels, rules=c.rules, prompt_text=prompt_text,
                           response=cfg.rollout.max_new_tokens)
    w = world_size or cfg.trainer.world_size
    sp = cfg.trainer.sequence_parallel
    asked = colocated is not None
    if colocated is None:
        colocated = cfg.rollout.placement_for(cfg.trainer.device) == "colocated"
    from evr1.models.runtime import resolve_dtype

    t = cfg.trainer
    common = dict(dtype=resolve_dtype(cfg.model.dtype, "cuda") if t.device == "cuda" else "float32",
                  checkpointing=cfg.model.gradient_checkpointing, micro_batch=t.micro_batch_size,
                  frozen_vision=cfg.model.freeze_vision_tower, reference_model=cfg.algorithm.use_kl_loss,
                  max_tokens=t.max_tokens_per_micro_batch, logits_chunk=t.logits_chunk_tokens,
                  rollout_bytes=rollout_share_bytes(cfg, arch, gpu_gib) if colocated else 0,
                  engine_sleeps=colocated and cfg.rollout.sleep_level >= 1)
    setups = {"1 GPU, sp 1": Setup(world_size=1, sp=1, **common),
              f"FSDP {w}, sp 1": Setup(world_size=w, sp=1, **common)}
    if sp > 1:
        setups[f"FSDP {w}, sp {sp}"] = Setup(world_size=w, sp=sp, **common)
    mode = "colocated" if colocated else "separate"
    resources = plan_resources(cfg, world_size=w, mode=mode)
    source = f"rollout.placement: {cfg.rollout.placement}, trainer.device: {t.device}"
    if asked and mode != cfg.rollout.placement_for(t.device):
        source = f"{mode} as asked; the config's {source}"
    placement = [f"placement ({source}):",
                 *(f"  {line}" for line in resources.describe())]
    return plan_table(arch, tokens, setups, gpu_gib) + "\n\n" + "\n".join(placement)
