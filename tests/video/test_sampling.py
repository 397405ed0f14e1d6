"""qwen-vl-utils frame-count, index and resize rules (spec §3.1 / §3.2 and the reference source)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evr1.video.sampling import (
    frame_range,
    image_size,
    sample_frame_indices,
    smart_nframes,
    smart_resize,
    video_pixel_budget,
)


# --- worked examples of spec §3.1 (f=32, fps=2, max_frames=128, min_px=3136, max_px=262144) ----


def test_worked_example_720p_60s():
    n = smart_nframes(1800, 30.0, fps=2.0, max_frames=128)
    assert n == 120  # 1800/30·2
    min_px, max_px = video_pixel_budget(n, factor=32, min_pixels=3136, max_pixels=262144)
    assert (min_px, max_px) == (3136, 262144)  # the given max is below the 768·32² cap
    h, w = smart_resize(720, 1280, factor=32, min_pixels=min_px, max_pixels=max_px)
    assert (h, w) == (384, 672)
    assert n // 2 * (h // 32) * (w // 32) == 15120  # visual tokens quoted in the spec
    idx = sample_frame_indices(1800, n, video_fps=30.0)
    assert idx[0] == 0 and idx[-1] == 1799 and len(idx) == 120
    assert np.allclose(np.diff(idx).mean(), 1799 / 119, atol=0.01)  # "≈ every 15.13 frames"


def test_worked_example_720_rounds_half_to_even():
    # 720/32 = 22.5 rounds to 22 (Python banker's rounding), giving 704 before the budget step.
    assert smart_resize(720, 1280, factor=32, min_pixels=1, max_pixels=10**9) == (704, 1280)


def test_worked_example_ten_minutes_capped():
    assert smart_nframes(18000, 30.0, fps=2.0, max_frames=128) == 128
    h, w = smart_resize(1024, 1024, factor=32, min_pixels=3136, max_pixels=262144)
    assert 128 // 2 * (h // 32) * (w // 32) == 16384  # full-budget square frames, spec §3.1


def test_worked_example_short_clips():
    assert smart_nframes(30, 30.0, fps=2.0) == 4  # 1 s at 30 fps: max(2, 4)
    assert smart_nframes(3, 30.0, fps=2.0) == 2  # min(4, 3) = 3, floored to 2


# --- frame count rules --------------------------------------------------------------------------


def test_fps_mode_floor_vs_round_between_versions():
    # 44 frames at 8 fps, 2 fps target: 11 frames. 0.0.14 floors to 10; 0.0.8 rounds 5.5 → 6 → 12.
    assert smart_nframes(44, 8.0, fps=2.0, rules="0.0.14") == 10
    assert smart_nframes(44, 8.0, fps=2.0, rules="0.0.8") == 12
    # 36 frames: 9 → round(4.5) = 4 (half to even) → 8 in 0.0.8; floor gives 8 too.
    assert smart_nframes(36, 8.0, fps=2.0, rules="0.0.8") == 8


def test_only_0_0_14_clamps_to_total():
    # 10 frames at 2 fps sampled at 4 fps would be 20 frames: 0.0.14 clamps to 10, 0.0.8 raises.
    assert smart_nframes(10, 2.0, fps=4.0, max_frames=64, rules="0.0.14") == 10
    with pytest.raises(ValueError, match="nframes should in interval"):
        smart_nframes(10, 2.0, fps=4.0, max_frames=64, rules="0.0.8")


def test_min_and_max_frames_round_to_even():
    # min_frames 5 → ceil to 6; max_frames 9 → floor to 8.
    assert smart_nframes(100, 30.0, fps=1.0, min_frames=5) == 6
    assert smart_nframes(1000, 10.0, fps=2.0, max_frames=9) == 8
    # Default max_frames is min(768, N) floored to even.
    assert smart_nframes(100_000, 10.0, fps=2.0) == 768


@pytest.mark.parametrize("rules", ["0.0.14", "0.0.8"])
def test_nframes_mode(rules):
    assert smart_nframes(100, 30.0, nframes=7, rules=rules) == 8  # round(3.5) = 4
    assert smart_nframes(100, 30.0, nframes=5, rules=rules) == 4  # round(2.5) = 2, half to even
    with pytest.raises(ValueError):
        smart_nframes(10, 30.0, nframes=16, rules=rules)  # more frames than the video has
    with pytest.raises(ValueError):
        smart_nframes(10, 30.0, nframes=1, rules=rules)  # rounds to 0 < 2


def test_fps_and_nframes_together_and_unknown_rules_raise():
    with pytest.raises(ValueError, match="either"):
        smart_nframes(100, 30.0, fps=2.0, nframes=8)
    with pytest.raises(ValueError, match="unknown rules"):
        smart_nframes(100, 30.0, rules="0.0.99")


def test_one_frame_video_raises():
    with pytest.raises(ValueError):
        smart_nframes(1, 8.0, fps=2.0)


# --- indices ------------------------------------------------------------------------------------


def test_indices_match_torch_linspace_round():
    # qwen-vl-utils: torch.linspace(start, end, n).round(); ties included, on a grid of sizes.
    for total in range(2, 400, 7):
        for n in range(2, min(total, 64) + 1, 2):
            expected = torch.linspace(0, total - 1, n).round().long().tolist()
            assert sample_frame_indices(total, n, video_fps=10.0) == expected, (total, n)


def test_frame_range_seconds():
    # N=100 at 10 fps: start 1.05 s → ceil(10.5) = 11; end 5 s → floor(50) = 50.
    assert frame_range(100, 10.0, start=1.05, end=5.0) == (11, 50)
    assert frame_range(100, 10.0, end=99.0) == (0, 99)  # clamped to the duration, then to N-1
    idx = sample_frame_indices(100, 4, video_fps=10.0, start=1.05, end=5.0)
    assert idx == torch.linspace(11, 50, 4).round().long().tolist()
    with pytest.raises(ValueError, match="invalid time range"):
        frame_range(100, 10.0, start=5.0, end=5.0)


# --- resizing -------------------------------------------------------------------------------------


def test_smart_resize_scales_up_to_min_pixels():
    # 48×64 at factor 28, min 100352: β = √(100352/3072) ≈ 5.7155 → ceil(9.80)·28, ceil(13.06)·28.
    beta = math.sqrt(100352 / (48 * 64))
    assert smart_resize(48, 64, factor=28, min_pixels=100352, max_pixels=602112) == (
        math.ceil(48 * beta / 28) * 28,
        math.ceil(64 * beta / 28) * 28,
    ) == (280, 392)


def test_smart_resize_errors():
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(1, 201, factor=28)
    assert smart_resize(28, 28 * 200, factor=28, max_pixels=10**9) == (28, 5600)  # exactly 200 is allowed
    with pytest.raises(ValueError, match="max_pixels"):
        smart_resize(100, 100, factor=28, min_pixels=1000, max_pixels=10)


def test_smart_resize_outputs_factor_multiples_within_bounds():
    rng = np.random.default_rng(0)
    for _ in range(300):
        h, w = (int(x) for x in rng.integers(10, 3000, 2))
        if max(h, w) / min(h, w) > 200:
            continue
        rh, rw = smart_resize(h, w, factor=32, min_pixels=128 * 32 * 32, max_pixels=768 * 32 * 32)
        assert rh % 32 == 0 and rw % 32 == 0
        assert rh * rw <= 768 * 32 * 32


def test_image_size_uses_image_token_bounds():
    # 50×70 at factor 28 with the image defaults (4·28² .. 16384·28²): 1.79 → 2, 2.5 → 2 (half to even).
    assert image_size(50, 70, factor=28) == (56, 56)
    # A tiny image is scaled up to at least 4 tokens of 32².
    h, w = image_size(8, 8, factor=32)
    assert (h, w) == (64, 64)
    assert image_size(4000, 4000, factor=28, max_pixels=256 * 28 * 28) == (448, 448)


# --- pixel budget -------------------------------------------------------------------------------


def test_budget_0_0_14_defaults_and_caps(monkeypatch):
    monkeypatch.delenv("MODEL_SEQ_LEN", raising=False)
    # f=32: min 128·32² = 131072; total 128000·32²·0.9; total/120·2 far above 768·32² → cap 786432.
    assert video_pixel_budget(120, factor=32) == (131072, 786432)
    # A given total: 16 frames, total 1.6e6 → 200000 per frame; a larger given max is capped to it.
    assert video_pixel_budget(16, factor=28, total_pixels=1_600_000) == (100352, 200000)
    assert video_pixel_budget(16, factor=28, total_pixels=1_600_000, max_pixels=150000)[1] == 150000
    assert video_pixel_budget(16, factor=28, total_pixels=1_600_000, max_pixels=300000)[1] == 200000
    # The cap never falls below 1.05·min_pixels.
    assert video_pixel_budget(1000, factor=28, total_pixels=1000)[1] == int(100352 * 1.05)


def test_budget_model_seq_len_env(monkeypatch):
    monkeypatch.setenv("MODEL_SEQ_LEN", "1000")
    # total = 1000·1024·0.9 = 921600; /120·2 = 15360 < int(131072·1.05) = 137625.
    assert video_pixel_budget(120, factor=32) == (131072, 137625)


def test_budget_0_0_8_max_pixels_replaces_cap():
    # 0.0.8 constants are fixed at 28²: min 100352, cap min(602112, 19267584/4·2).
    assert video_pixel_budget(4, factor=32, rules="0.0.8") == (100352, 602112)
    assert video_pixel_budget(16, factor=28, total_pixels=1_600_000, max_pixels=300000, rules="0.0.8")[1] == 300000


# --- table of frame-count rules, both versions (spec §3.1 / §3.2) ---------------------------------

NFRAMES_TABLE = [
    # (total, native fps, kwargs, rules, expected)
    (1800, 30.0, {"fps": 2.0, "max_frames": 128}, "0.0.14", 120),  # §3.1 60 s 720p example
    (1800, 30.0, {"fps": 2.0, "max_frames": 128}, "0.0.8", 120),
    (18000, 30.0, {"fps": 2.0, "max_frames": 128}, "0.0.14", 128),  # 10 minutes: capped
    (18000, 30.0, {"fps": 2.0, "max_frames": 128}, "0.0.8", 128),
    (30, 30.0, {"fps": 2.0}, "0.0.14", 4),  # 1 s clip: max(2, 4)
    (30, 30.0, {"fps": 2.0}, "0.0.8", 4),
    (3, 30.0, {"fps": 2.0}, "0.0.14", 2),  # 3 frames: min(4, 3) floored to 2
    (44, 8.0, {"fps": 2.0}, "0.0.14", 10),  # 11 → floor to 10
    (44, 8.0, {"fps": 2.0}, "0.0.8", 12),  # 11 → round(5.5)·2 = 12
    (900, 30.0, {"nframes": 64}, "0.0.14", 64),
    (900, 30.0, {"nframes": 63}, "0.0.8", 64),  # round(31.5) = 32 → 64
    (900, 30.0, {"nframes": 65}, "0.0.8", 64),  # round(32.5) = 32 (half to even)
]


@pytest.mark.parametrize(("total", "native", "kwargs", "rules", "expected"), NFRAMES_TABLE)
def test_smart_nframes_table(total, native, kwargs, rules, expected):
    assert smart_nframes(total, native, rules=rules, **kwargs) == expected


RAISES_TABLE = [
    (10, 2.0, {"fps": 4.0, "max_frames": 64}, "0.0.8"),  # 0.0.8 does not clamp to N: 20 > 10
    (100, 30.0, {"nframes": 128}, "0.0.8"),  # §3.2: a video shorter than nframes raises
    (100, 30.0, {"nframes": 128}, "0.0.14"),
    (1, 30.0, {"fps": 2.0}, "0.0.14"),  # 1-frame video: floor(1) = 0 < 2
]


@pytest.mark.parametrize(("total", "native", "kwargs", "rules"), RAISES_TABLE)
def test_smart_nframes_raises_like_the_reference(total, native, kwargs, rules):
    with pytest.raises(ValueError, match="nframes should in interval"):
        smart_nframes(total, native, rules=rules, **kwargs)


def test_worked_example_sample_fps_and_token_count_0_0_8():
    # §3.2: 0.0.8 budget at factor 28 for 120 frames: min 100352, cap min(602112, 19267584/120·2).
    min_px, max_px = video_pixel_budget(120, factor=28, rules="0.0.8")
    assert (min_px, max_px) == (100352, 321126.4)
    h, w = smart_resize(720, 1280, factor=28, min_pixels=min_px, max_pixels=max_px)
    # β = √(921600 / 321126.4) ≈ 1.694: 425.0 → 420, 755.5 → 728 (floored to 28).
    assert (h, w) == (420, 728) and h * w <= max_px
    # sample_fps = n / N · r for the §3.1 example.
    assert 120 / 1800 * 30.0 == 2.0


@pytest.mark.parametrize(("family", "factor", "rules"), [("qwen2_vl", 28, "0.0.14"), ("qwen2_5_vl", 28, None),
                                                          ("qwen3_vl", 32, "0.0.14"), ("qwen3_5", 32, "0.0.14")])
def test_factor_is_patch_size_times_merge_by_family(family, factor, rules):
    from evr1.models.families import FAMILIES

    fam = FAMILIES[family]
    assert fam.factor == fam.patch_size * 2 == factor
    assert rules is None or fam.frame_rules == rules
    h, w = smart_resize(720, 1280, factor=fam.factor, min_pixels=1, max_pixels=10**9)
    assert h % factor == 0 and w % factor == 0
