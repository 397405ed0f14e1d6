"""Own patchify/normalisation against an independent computation and against HF's own image processor."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

from evr1.models.vision import format_timestamp, frame_group_timestamps, normalize_video, patchify

from .conftest import FAMILY_NAMES, make_clip


def _loop_patchify(frames: torch.Tensor, ps: int, m: int, tps: int) -> torch.Tensor:
    """Patch rows built one by one: temporal group, then merge window (row-major), then the patch inside it."""
    t, c, h, w = frames.shape
    frames = torch.cat([frames] + [frames[-1:]] * (-t % tps))
    rows = []
    for g in range(frames.shape[0] // tps):
        for bh in range(h // ps // m):
            for bw in range(w // ps // m):
                for mh in range(m):
                    for mw in range(m):
                        y, x = (bh * m + mh) * ps, (bw * m + mw) * ps
                        block = frames[g * tps : (g + 1) * tps, :, y : y + ps, x : x + ps]  # tps, C, ps, ps
                        rows.append(block.permute(1, 0, 2, 3).reshape(-1))  # C, tps, ps, ps
    return torch.stack(rows)


@pytest.mark.parametrize("t", [1, 2, 3, 4])
def test_patchify_matches_patch_by_patch_construction(t):
    frames = torch.randn(t, 3, 8, 12)
    patches, grid = patchify(frames, patch_size=2, merge_size=2, temporal_patch_size=2)
    assert grid == ((t + 1) // 2, 4, 6)
    assert torch.equal(patches, _loop_patchify(frames, 2, 2, 2))


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("shape", [(56, 84), (50, 70), (200, 300), (33, 97)])
def test_image_inputs_equal_hf_image_processor(tiny_dirs, adapters, family, shape):
    """HF's Qwen2VLImageProcessorPil (no torchvision needed), configured from the same preprocessor_config.json,
    must give bit-identical pixel_values and image_grid_thw — including its own smart resize."""
    cfg = json.loads((tiny_dirs[family] / "preprocessor_config.json").read_text())
    keys = ["patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std"]
    size = cfg.get("size") or {"shortest_edge": cfg["min_pixels"], "longest_edge": cfg["max_pixels"]}
    hf = Qwen2VLImageProcessorPil(size=size, **{k: cfg[k] for k in keys})
    image = np.random.default_rng(1).integers(0, 256, (*shape, 3), dtype=np.uint8)
    expected = hf(images=[image], return_tensors="pt")
    got = adapters[family].encode_prompt("Look <image>", images=[image]).mm
    assert torch.equal(got["image_grid_thw"], expected["image_grid_thw"])
    assert got["pixel_values"].dtype == expected["pixel_values"].dtype == torch.float32
    assert torch.equal(got["pixel_values"], expected["pixel_values"])


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("t", [3, 4])
def test_video_inputs_equal_hf_video_layout(adapters, family, t):
    """Reference: Qwen2VLVideoProcessor._preprocess/patchify (transformers 5.23) written out — fused
    rescale+normalise `(x − 255·mean) / (255·std)` in float32, last frame repeated to an even T, then
    view (B, gt, tps, C, gh/m, m, ps, gw/m, m, ps) and permute (0,1,4,7,5,8,3,2,6,9). The HF class itself
    needs torchvision, which cannot be installed next to the CPU torch."""
    ad = adapters[family]
    s = ad.video
    clip = make_clip(ad.video.factor, t=t)
    x = torch.from_numpy(clip.frames).permute(0, 3, 1, 2).float()[None]  # B, T, C, H, W
    mean = torch.tensor(s.mean) * 255.0
    std = torch.tensor(s.std) * 255.0
    x = (x - mean[None, None, :, None, None]) / std[None, None, :, None, None]
    if pad := -t % s.temporal_patch_size:
        x = torch.cat([x, x[:, -1:].expand(-1, pad, -1, -1, -1)], dim=1)
    b, tt, c, h, w = x.shape
    ps, m, tps = s.patch_size, s.merge_size, s.temporal_patch_size
    gt, gh, gw = tt // tps, h // ps, w // ps
    ref = x.view(b, gt, tps, c, gh // m, m, ps, gw // m, m, ps).permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    ref = ref.reshape(gt * gh * gw, c * tps * ps * ps)
    got = ad.encode_prompt("<video>", videos=[clip]).mm
    assert got["video_grid_thw"].tolist() == [[gt, gh, gw]]
    assert torch.allclose(got["pixel_values_videos"], ref, atol=1e-6, rtol=0)
    # and the normalisation is exactly the fused one (not only close)
    assert torch.equal(normalize_video(clip.frames, s.mean, s.std)[None], x[:, :t])


@pytest.mark.parametrize(
    ("indices", "fps", "expected"),
    [
        # (0/4 + 2/4)/2 = 0.25 → "0.2" and (4/4 + 6/4)/2 = 1.25 → "1.2": f"{x:.1f}" rounds half to even
        ([0, 2, 4, 6], 4.0, ["<0.2 seconds>", "<1.2 seconds>"]),
        # odd count: the last index is repeated, so the last group is (8/2 + 8/2)/2 = 4.0
        ([0, 4, 8], 2.0, ["<1.0 seconds>", "<4.0 seconds>"]),
        ([15, 45, 75, 105], 30.0, ["<1.0 seconds>", "<3.0 seconds>"]),
    ],
)
def test_qwen3_timestamps_match_hf_processor(indices, fps, expected):
    ours = frame_group_timestamps(indices, fps, 2)
    # transformers/models/qwen3_vl/processing_qwen3_vl.py: Qwen3VLProcessor._calculate_timestamps + f"<{t:.1f} seconds>"
    theirs = Qwen3VLProcessor._calculate_timestamps(None, list(indices), fps, 2)
    assert ours == theirs
    assert [format_timestamp(t) for t in ours] == expected


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_deferred_media_prepared_on_the_device_equal_the_processor_path(adapters, family):
    """uint8 media prepared by `ModelBatch.to` (the trainer's path) give bit-identical float32 patches to
    the eager processor path, and in bf16 exactly the eager patches' bf16 rounding (relative error ≤ 2⁻⁸)."""
    ad = adapters[family]
    clips = [make_clip(ad.video.factor, t=3, seed=1), make_clip(ad.video.factor, t=4, seed=2)]
    image = np.random.default_rng(3).integers(0, 256, (70, 90, 3), dtype=np.uint8)
    args = [("<video> and <image>", {"videos": clips[:1], "images": [image]}), ("<video>", {"videos": clips[1:]})]
    eager = ad.collate([ad.encode_prompt(p, **kw) for p, kw in args], [[1, 2], [3]])
    lazy_prompts = [ad.encode_prompt(p, defer_media=True, **kw) for p, kw in args]
    assert all("pixel_values_videos" not in p.mm and "pixel_values" not in p.mm for p in lazy_prompts)
    lazy = ad.collate(lazy_prompts, [[1, 2], [3]])
    with pytest.raises(ValueError, match="call .to"):
        lazy.model_inputs()
    want, got = eager.to("cpu").model_inputs(), lazy.to("cpu").model_inputs()
    assert want.keys() == got.keys()
    for key in want:
        assert want[key].dtype == got[key].dtype and torch.equal(want[key], got[key]), key
    half = lazy.to("cpu", dtype=torch.bfloat16).model_inputs()
    for key in ("pixel_values", "pixel_values_videos"):
        assert half[key].dtype == torch.bfloat16
        assert torch.equal(half[key], want[key].to(torch.bfloat16))
        assert torch.allclose(half[key].float(), want[key], rtol=2**-8, atol=0)
