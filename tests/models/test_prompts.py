"""encode_prompt: vision-token counts, the Qwen3-VL layout, placeholders, and errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.video_utils import VideoMetadata

from .conftest import FAMILY_NAMES, make_clip


def _runs(types: list[int]) -> list[int]:
    """Media kinds in order of appearance (collapsing consecutive pads of one item, ignoring text)."""
    out, prev = [], 0
    for t in types:
        if t and t != prev:
            out.append(t)
        prev = t
    return out


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_video_token_count_is_t_over_2_times_h_times_w_blocks(adapters, family):
    ad = adapters[family]
    f = ad.family.factor
    clip = make_clip(f, t=6, h_blocks=2, w_blocks=3)
    p = ad.encode_prompt("Watch <video> What moves?", videos=[clip])
    expected = (6 // 2) * 2 * 3  # spec §3.4: (T/2)·(H/factor)·(W/factor)
    assert p.input_ids.count(ad.video_pad_id) == expected
    assert p.mm_token_type_ids.count(2) == expected
    assert [i for i, t in enumerate(p.input_ids) if t == ad.video_pad_id] == [
        i for i, t in enumerate(p.mm_token_type_ids) if t == 2
    ]
    assert p.mm["video_grid_thw"].tolist() == [[3, 2 * 2, 3 * 2]]
    assert p.mm["pixel_values_videos"].shape[0] == 3 * 4 * 6
    groups = 3 if ad.family.timestamps else 0
    # one outer start/end from the chat template, plus one per temporal group for Qwen3-VL
    assert p.input_ids.count(ad.vision_start_id) == 1 + groups
    assert p.input_ids.count(ad.vision_end_id) == 1 + groups
    assert p.text.count("seconds>") == groups
    assert p.text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_image_token_count(adapters, family):
    ad = adapters[family]
    f = ad.family.factor
    image = np.zeros((3 * f, 2 * f, 3), dtype=np.uint8)  # already a multiple of factor and within budget
    p = ad.encode_prompt("<image>Which color?", images=[image])
    assert p.input_ids.count(ad.image_pad_id) == 3 * 2 == p.mm_token_type_ids.count(1)
    assert p.mm["image_grid_thw"].tolist() == [[1, 6, 4]]
    assert set(p.mm) == {"pixel_values", "image_grid_thw"}


def test_qwen3_video_text_equals_hf_qwen3vl_processor_expansion(adapters):
    """The expanded prompt must equal what transformers' Qwen3VLProcessor builds: its own
    `replace_video_token` (processing_qwen3_vl.py) substituted for the template's `<|video_pad|>`
    (processing_utils.get_text_with_replacements replaces only the inner pad, keeping the outer
    vision_start/vision_end). Called with a plain namespace as `self`: the HF video processor class
    needs torchvision."""
    ad = adapters["qwen3_vl"]
    clip = make_clip(32, t=4, fps=4.0, indices=[0, 2, 4, 6], total=8)
    p = ad.encode_prompt("Watch <video> now", videos=[clip])
    fake_self = SimpleNamespace(
        video_processor=SimpleNamespace(merge_size=2, temporal_patch_size=2),
        vision_start_token="<|vision_start|>",
        vision_end_token="<|vision_end|>",
        video_token="<|video_pad|>",
        _calculate_timestamps=lambda *a: Qwen3VLProcessor._calculate_timestamps(None, *a),
    )
    video_inputs = {
        "video_grid_thw": p.mm["video_grid_thw"],
        "video_metadata": [VideoMetadata(total_num_frames=8, fps=4.0, frames_indices=[0, 2, 4, 6])],
    }
    expansion = Qwen3VLProcessor.replace_video_token(fake_self, video_inputs, 0)
    template = ad.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "Watch "}, {"type": "video"}, {"type": "text", "text": " now"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert p.text == template.replace("<|video_pad|>", expansion)
    assert "<0.2 seconds><|vision_start|>" in p.text and "<1.2 seconds><|vision_start|>" in p.text
    assert p.input_ids == ad.tokenizer(p.text, add_special_tokens=False)["input_ids"]


def test_qwen2_5_second_per_grid_ts_uses_sampled_fps(adapters):
    ad = adapters["qwen2_5_vl"]
    # 8 of 300 native frames at 30 fps → sampled fps 8/300·30 = 0.8 → 2 frames per grid = 2.5 s
    clip = make_clip(28, t=8, fps=30.0, indices=[int(i) for i in np.linspace(0, 299, 8)], total=300)
    mm = ad.encode_prompt("<video>", videos=[clip]).mm
    assert mm["second_per_grid_ts"].tolist() == pytest.approx([2.5])
    assert "second_per_grid_ts" not in adapters["qwen3_vl"].encode_prompt("<video>", videos=[make_clip(32)]).mm


def test_placeholders_order_and_insertion(adapters):
    ad = adapters["qwen2_5_vl"]
    v1, v2 = make_clip(28, seed=1), make_clip(28, seed=2)
    image = np.zeros((56, 56, 3), dtype=np.uint8)
    p = ad.encode_prompt("<video> first <image> then <video> last", videos=[v1, v2], images=[image])
    assert _runs(p.mm_token_type_ids) == [2, 1, 2]
    assert p.mm["pixel_values_videos"].shape[0] == 2 * (2 * 4 * 6)
    # no placeholder in the prompt: the media are put before the text
    q = ad.encode_prompt("What moves?", videos=[v1])
    assert "<|vision_end|>What moves?" in q.text
    assert _runs(q.mm_token_type_ids) == [2]
    # text only: nothing but text tokens
    r = ad.encode_prompt("Just text", system="Be brief.")
    assert set(r.mm_token_type_ids) == {0} and r.mm == {}
    assert "<|im_start|>system\nBe brief.<|im_end|>" in r.text


def test_placeholder_count_mismatch_names_the_counts(adapters):
    ad = adapters["qwen3_vl"]
    with pytest.raises(ValueError, match=r"2 <video> placeholder\(s\) but 1 video"):
        ad.encode_prompt("<video> and <video>", videos=[make_clip(32)])
    with pytest.raises(ValueError, match=r"1 <image> placeholder\(s\) but 0 image"):
        ad.encode_prompt("<image> what?")


def test_bad_media_errors_name_the_field(adapters):
    ad = adapters["qwen3_vl"]
    clip = make_clip(32)
    bad_size = make_clip(28)  # 56×84 frames are not multiples of Qwen3-VL's factor 32
    with pytest.raises(ValueError, match="video 0: field frames .* multiples of 32"):
        ad.encode_prompt("<video>", videos=[bad_size])
    clip.frame_indices = clip.frame_indices[:-1]
    with pytest.raises(ValueError, match="video 0: field frame_indices"):
        ad.encode_prompt("<video>", videos=[clip])
    with pytest.raises(ValueError, match="image 0: field image"):
        ad.encode_prompt("<image>", images=[np.zeros((32, 32), dtype=np.uint8)])


def test_collate_pads_prompts_left_and_responses_right(adapters):
    ad = adapters["qwen2_vl"]
    short = ad.encode_prompt("Hi")
    long = ad.encode_prompt("<video> what moves left or right?", videos=[make_clip(28)])
    batch = ad.collate([short, long], [[10, 11, ad.video_pad_id], [12]])
    lp = batch.prompt_length
    assert lp == len(long)
    assert batch.input_ids.shape == (2, lp + 3)
    assert batch.attention_mask[0, : lp - len(short)].sum() == 0  # left padding
    assert batch.input_ids[0, lp - len(short) : lp].tolist() == short.input_ids
    # a sampled vision token in a response is replaced by pad and masked out
    assert batch.response_ids.tolist() == [[10, 11, ad.pad_token_id], [12, ad.pad_token_id, ad.pad_token_id]]
    assert batch.response_mask.tolist() == [[1, 1, 0], [1, 0, 0]]
    assert batch.attention_mask[1, lp:].tolist() == [1, 0, 0]
    assert batch.mm_token_type_ids[:, lp:].sum() == 0
    assert torch.equal(batch.mm["pixel_values_videos"], long.mm["pixel_values_videos"])
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        ad.collate([short, long], [[1]])


def test_decode_drops_special_tokens(adapters):
    ad = adapters["qwen3_vl"]
    ids = ad.tokenizer.encode("<answer>B</answer>", add_special_tokens=False) + [ad.eos_token_ids[0]]
    assert ad.decode(ids) == "<answer>B</answer>"
