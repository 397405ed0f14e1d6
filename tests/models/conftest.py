"""Tiny checkpoints of every buildable family, built once per test session."""

from __future__ import annotations

import numpy as np
import pytest

from evr1.models import load_adapter, load_model, make_tiny
from evr1.video.clip import VideoClip

FAMILY_NAMES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"]


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_models")
    return {fam: make_tiny(fam, root / fam, seed=0) for fam in FAMILY_NAMES}


@pytest.fixture(scope="session")
def adapters(tiny_dirs):
    return {fam: load_adapter(d) for fam, d in tiny_dirs.items()}


@pytest.fixture(scope="session")
def models(tiny_dirs):
    return {fam: load_model(d) for fam, d in tiny_dirs.items()}


def make_clip(factor: int, t: int = 4, h_blocks: int = 2, w_blocks: int = 3, *, fps: float = 4.0, seed: int = 0,
              indices: list[int] | None = None, total: int | None = None) -> VideoClip:
    """A random clip whose sides are multiples of `factor` (as the frame cache delivers them)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (t, h_blocks * factor, w_blocks * factor, 3), dtype=np.uint8)
    indices = indices if indices is not None else [2 * i for i in range(t)]
    total = total if total is not None else indices[-1] + 1
    return VideoClip(frames=frames, fps=fps, frame_indices=indices, total_frames=total, duration=total / fps)


def positions_of_each_pass(model, ad, prompt, responses, batch, dtype) -> tuple[dict, dict]:
    """({pass: positions per response}, {pass: log-probs}) of the grouped (shared-prefix), packed and padded
    passes of `prompt` with `responses` (`batch`: the padded micro-batch, on the model's device): the t, h, w
    positions each pass hands the language model, caught by a hook, per sequence and in order. Used by
    tests/train/test_bf16_positions.py and benchmarks/gpu_bare.py (the same check on a GPU)."""
    import torch

    from evr1.models import grouped_response_log_probs, response_log_probs
    from evr1.models.packed import packed_response_log_probs

    seen = []
    hook = model.model.language_model.register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["position_ids"][-3:].detach().cpu().clone()), with_kwargs=True)
    positions, lps = {}, {}
    try:
        with torch.no_grad():
            for name in ("grouped", "packed", "padded"):
                seen.clear()
                if name == "grouped":
                    lp, _ = grouped_response_log_probs(model, ad, prompt, responses, dtype=dtype, chunk_tokens=2)
                    prompt_pos, response_pos = seen
                    pos = [torch.cat([prompt_pos[:, 0], response_pos[:, r, :len(x)]], 1) for r, x in enumerate(responses)]
                elif name == "packed":
                    lp, _ = packed_response_log_probs(model, batch, chunk_tokens=2)
                    flat, start, pos = seen[0][:, 0], 0, []
                    for r in range(len(responses)):
                        n = int(batch.attention_mask[r].sum())
                        pos.append(flat[:, start:start + n])
                        start += n
                else:
                    lp, _ = response_log_probs(model, batch, chunk_tokens=2)
                    mask = batch.attention_mask.cpu().bool()
                    pos = [seen[0][:, r, mask[r]] for r in range(len(responses))]
                positions[name] = [p.tolist() for p in pos]
                lps[name] = lp.float().cpu()
    finally:
        hook.remove()
    return positions, lps
