"""`evr1 plan`'s advice when the config's own setup does not fit: the smallest change that does.

Tried in order, the first that fits wins (each candidate is the config with a few overrides, validated
by the config loader, and planned by `evr1.train.plan`'s own `memory` with the same inputs as
`plan_for_config`):

1. a higher `trainer.sequence_parallel`: powers of 2 that divide the world size and the decoder's
   attention heads (what Ulysses needs), with the one-sequence micro-batch it requires;
2. a larger `trainer.world_size` (doubling, up to `MAX_WORLD`), with the sequence-parallel degree kept,
   or raised when the larger world alone is not enough;
3. fewer frames (`cache.nframes` when set, else `cache.max_frames`): the most that fit with the
   current setup;
4. both: the highest sequence-parallel degree of the current world and the most frames that fit then;
5. a larger world with its highest sequence-parallel degree, and the most frames that fit there.

When fewer frames alone is the answer and sequence parallelism would keep more of them, that is said too.

Nothing here changes the plan's own table (evr1/train/plan.py): the advice is printed after it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_WORLD = 1024


@dataclass(frozen=True)
class Advice:
    """A change (config overrides) and the planned bytes per GPU with it."""

    overrides: list[str]
    total: int
    what: str  # in words: "sequence parallel 8 instead of 1"


@dataclass
class Verdict:
    """The config's own setup against the GPU, and the advice when it does not fit."""

    total: int
    budget: float  # bytes usable on one GPU (the plan's reserve kept free)
    advice: Advice | None = None
    alternative: Advice | None = None  # a second change worth knowing (more frames kept, with sequence parallel)
    tried: list[str] = field(default_factory=list)  # what was tried in vain, for the "nothing does" line

    @property
    def fits(self) -> bool:
        return self.total <= self.budget


def attention_heads(cfg: Any) -> int | None:
    """The decoder's attention heads: the model folder's config.json, a known checkpoint, or the tiny sizes."""
    from evr1.train.plan import KNOWN_MODELS

    if cfg.model.path is None:
        if cfg.model.tiny is None:
            return None
        from evr1.models.tiny import DEFAULT_SIZES

        return int({**DEFAULT_SIZES, **cfg.model.tiny.sizes}["num_attention_heads"])
    folder = Path(cfg.model.path).expanduser()
    if (folder / "config.json").is_file():
        hf = json.loads((folder / "config.json").read_text())
        heads = (hf.get("text_config") or {}).get("num_attention_heads", hf.get("num_attention_heads"))
        return int(heads) if isinstance(heads, int) else None
    known = KNOWN_MODELS.get(folder.name)
    return int(known[1]["num_attention_heads"]) if known else None


def planned_total(cfg: Any, arch: Any, *, gpu_gib: float, source_hw: tuple[int, int], prompt_text: int,
                  colocated: bool | None) -> int:
    """Bytes per GPU of the config's own setup (world size, sequence parallel), as `plan_for_config` plans it."""
    from evr1.models.runtime import resolve_dtype
    from evr1.train.plan import Setup, memory, rollout_share_bytes, sample_tokens

    c, t = cfg.cache, cfg.trainer
    frames = c.nframes or c.max_frames
    frames += frames % 2
    tokens = sample_tokens(arch, frames, source_hw, min_pixels=c.min_pixels, max_pixels=c.max_pixels,
                           total_pixels=c.total_pixels, rules=c.rules, prompt_text=prompt_text,
                           response=cfg.rollout.max_new_tokens)
    if colocated is None:
        colocated = cfg.rollout.placement_for(t.device) == "colocated"
    setup = Setup(world_size=t.world_size, sp=t.sequence_parallel,
                  dtype=resolve_dtype(cfg.model.dtype, "cuda") if t.device == "cuda" else "float32",
                  checkpointing=cfg.model.gradient_checkpointing, micro_batch=t.micro_batch_size,
                  frozen_vision=cfg.model.freeze_vision_tower, reference_model=cfg.algorithm.use_kl_loss,
                  max_tokens=t.max_tokens_per_micro_batch, logits_chunk=t.logits_chunk_tokens,
                  rollout_bytes=rollout_share_bytes(cfg, arch, gpu_gib) if colocated else 0,
                  engine_sleeps=colocated and cfg.rollout.sleep_level >= 1)
    return sum(memory(arch, tokens, setup).values())


def _powers_of_two(above: int, limit: int) -> list[int]:
    return [2**k for k in range(1, int(math.log2(max(limit, 1))) + 1) if above < 2**k <= limit]


def _world_changes(cfg: Any, world: int) -> list[str]:
    """Overrides that set the world size, with the batch it requires: prompts_per_step × rollout.n
    divisible by the world (every rank gets as many sequences), raised to the next such count."""
    out = [f"trainer.world_size={world}"]
    t, n = cfg.trainer, cfg.rollout.n
    step = world // math.gcd(world, n)  # prompts_per_step must be a multiple of this
    prompts = -(-t.prompts_per_step // step) * step
    if prompts != t.prompts_per_step:
        out.append(f"trainer.prompts_per_step={prompts}")
    mini, batch = t.mini_batch_size, prompts * n
    if mini is not None and (mini % world or batch % mini):
        # the smallest multiple of the world that divides the batch (the batch itself is one)
        mini = next(m for m in range(world, batch + 1, world) if m >= mini and batch % m == 0)
        out.append(f"trainer.mini_batch_size={mini}")
    return out


def _describe(cfg: Any, extra: list[str]) -> list[str]:
    """The changes besides frames, in words."""
    said = dict(o.split("=", 1) for o in extra)
    t = cfg.trainer
    names = {"trainer.world_size": ("GPUs", t.world_size), "trainer.sequence_parallel": ("sequence parallel", None),
             "trainer.prompts_per_step": ("prompts per step", t.prompts_per_step)}
    out = []
    for key, (name, old) in names.items():
        if key in said:
            if key == "trainer.sequence_parallel":
                out.append(f"sequence parallel {said[key]} instead of {t.sequence_parallel}")
            else:
                out.append(f"{said[key]} {name} instead of {old}")
    return out


def _sp_changes(cfg: Any, sp: int) -> list[str]:
    """Overrides that set the sequence-parallel degree, with what sp > 1 requires (config/root.py)."""
    out = [f"trainer.sequence_parallel={sp}"]
    t = cfg.trainer
    if sp > 1:
        if t.micro_batch_size > 1:
            out.append("trainer.micro_batch_size=1")
        if t.max_tokens_per_micro_batch is not None:
            out.append("trainer.max_tokens_per_micro_batch=null")
        if cfg.model.attn_implementation != "sdpa":
            out.append("model.attn_implementation=sdpa")
    return out


def smallest_fit(config: Path, overrides: list[str], *, gpu_gib: float, source_hw: tuple[int, int] = (720, 1280),
                 prompt_text: int = 128, colocated: bool | None = None, arch: Any = None) -> Verdict:
    """Whether the config (with `overrides`, `trainer.world_size` among them when the plan was given
    one) fits `gpu_gib`, and when not, the first change of the module docstring's list that does."""
    from evr1.config import ConfigError, load_config
    from evr1.train.plan import GIB, RESERVE, load_arch

    base = load_config(config, overrides)
    if arch is None:
        arch = load_arch(base.model.path, base.model.tiny.family if base.model.tiny else None)
    budget = gpu_gib * GIB * (1 - RESERVE)

    def total(cfg) -> int:
        return planned_total(cfg, arch, gpu_gib=gpu_gib, source_hw=source_hw, prompt_text=prompt_text,
                             colocated=colocated)

    def load(extra: list[str]):
        try:
            return load_config(config, [*overrides, *extra])
        except ConfigError:
            return None  # a combination the config refuses (e.g. heads the degree does not divide)

    verdict = Verdict(total(base), budget)
    if verdict.fits:
        return verdict
    t = base.trainer
    w, sp = t.world_size, t.sequence_parallel
    heads = attention_heads(base)

    def degrees(world: int, above: int) -> list[int]:
        return [d for d in _powers_of_two(above, world) if world % d == 0 and (heads is None or heads % d == 0)]

    def attempt(extra: list[str], what: str) -> Advice | None:
        cfg = load(extra)
        if cfg is None:
            return None
        used = total(cfg)
        return Advice(extra, used, what) if used <= budget else None

    # 1. sequence parallel, within the current world
    for d in degrees(w, sp):
        if found := attempt(_sp_changes(base, d), ", ".join(_describe(base, _sp_changes(base, d)))):
            verdict.advice = found
            return verdict
    verdict.tried.append(f"sequence parallel up to {max(degrees(w, sp), default=sp)} on {w} GPUs")
    # 2. a larger world, its sequence-parallel degree kept or raised
    world = w * 2
    while world <= MAX_WORLD:
        for d in [sp, *degrees(world, sp)]:
            extra = [*_world_changes(base, world), *(_sp_changes(base, d) if d != sp else [])]
            if found := attempt(extra, ", ".join(_describe(base, extra))):
                verdict.advice = found
                return verdict
        world *= 2
    verdict.tried.append(f"up to {MAX_WORLD} GPUs")
    # 3. fewer frames with the current setup; 4. with the highest sequence-parallel degree as well
    key = "nframes" if base.cache.nframes else "max_frames"
    frames = base.cache.nframes or base.cache.max_frames
    top = max(degrees(w, sp), default=sp)
    for extra in ([], _sp_changes(base, top) if top != sp else None):
        if extra is not None and (found := _most_frames(base, extra, key, frames, attempt)):
            verdict.advice = found
            if not extra and top != sp:  # the same cut with sequence parallel keeps more frames: say so
                more = _most_frames(base, _sp_changes(base, top), key, frames, attempt)
                if more and _frames_of(more, key) > _frames_of(found, key):
                    verdict.alternative = more
            return verdict
    verdict.tried.append(f"down to 2 frames (cache.{key})")
    # 5. a larger world (its highest sequence-parallel degree) and the most frames that fit there
    world = w * 2
    while world <= MAX_WORLD:
        d = max(degrees(world, sp), default=sp)
        extra = [*_world_changes(base, world), *(_sp_changes(base, d) if d != sp else [])]
        if found := _most_frames(base, extra, key, frames, attempt):
            verdict.advice = found
            return verdict
        world *= 2
    verdict.tried.append(f"fewer frames on up to {MAX_WORLD} GPUs")
    return verdict


def _frames_of(advice: Advice, key: str) -> int:
    return next(int(o.split("=", 1)[1]) for o in advice.overrides if o.startswith(f"cache.{key}="))


def _frame_changes(base: Any, key: str, n: int) -> list[str]:
    out = [f"cache.{key}={n}"]
    if key == "max_frames" and base.cache.min_frames > n:
        out.append(f"cache.min_frames={n}")
    return out


def _most_frames(base: Any, extra: list[str], key: str, frames: int, attempt) -> Advice | None:
    """The most frames (even, below `frames`) that fit with `extra`: a bisection, memory growing with frames."""
    parts = _describe(base, extra)

    def at(n: int) -> Advice | None:
        return attempt([*extra, *_frame_changes(base, key, n)],
                       ", ".join([f"{n} frames instead of {frames}", *parts]))

    lo, hi = 1, (frames - 1) // 2  # frames 2·k, k in [lo, hi]
    if hi < lo or at(2 * lo) is None:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(2 * mid) is not None:
            lo = mid
        else:
            hi = mid - 1
    return at(2 * lo)


def advice_lines(verdict: Verdict, check_command: list[str], gpu_gib: float) -> list[str]:
    """What `evr1 plan` prints under its table (nothing when the config's setup is within the GPU).

    Worded without "fits": the plan's own lines say that, and tests read them."""
    from evr1.train.plan import GIB

    if verdict.fits:
        return []
    if verdict.advice is None:
        return [f"this config needs {verdict.total / GIB:.1f} GiB per GPU; no change tried brings it under "
                f"{verdict.budget / GIB:.1f} GiB (tried: {'; '.join(verdict.tried)}). A GPU with more memory "
                f"(--gpu-memory-gib) or a smaller model is needed."]
    a = verdict.advice
    import shlex

    lines = [f"smallest change that makes it fit: {a.what} → {a.total / GIB:.1f} GiB per GPU, within the "
             f"{verdict.budget / GIB:.1f} GiB usable of {gpu_gib:g} GiB",
             f"  overrides: {' '.join(a.overrides)}",
             f"  check:     {shlex.join([*check_command, *a.overrides])}"]
    if verdict.alternative is not None:
        b = verdict.alternative
        lines += [f"or, keeping more frames: {b.what} → {b.total / GIB:.1f} GiB per GPU",
                  f"  overrides: {' '.join(b.overrides)}"]
    return lines
