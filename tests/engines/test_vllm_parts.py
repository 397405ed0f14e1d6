"""The parts of the vLLM path that need no vLLM: the prompt ids it is sent, the weight buckets it
loads, the M-RoPE rule the trainer shares with it, and the tiny models it can run. (vLLM itself runs
in tests/vllm, `make test-vllm`.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from evr1.engines import SamplingParams
from evr1.engines.hf import HFEngine
from evr1.engines.vllm_engine import vllm_prompt_ids
from evr1.engines.vllm_sync import write_buckets
from evr1.models import load_adapter, make_tiny
from evr1.models.tiny import VLLM_SIZES, head_dim
from tests.engines.conftest import clip

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_parts")
    return {fam: load_adapter(make_tiny(fam, root / fam, seed=0)) for fam in FAMILIES}


def _template_ids(adapter, prompt: str, n_videos: int, n_images: int) -> list[int]:
    """The chat template's ids with one pad per item: what vLLM must be sent."""
    messages = [{"role": "user", "content": adapter._content(prompt, n_videos, n_images)}]
    text = adapter.tokenizer.apply_chat_template(messages, chat_template=adapter.chat_template, tokenize=False,
                                                 add_generation_prompt=True)
    return list(adapter.tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["text", "image", "video", "videos", "image_video"])
def test_vllm_is_sent_the_template_ids_with_one_pad_per_item(adapters, family, kind):
    ad = adapters[family]
    f = ad.video.factor
    img = np.random.default_rng(0).integers(0, 256, (2 * f, 3 * f, 3), dtype=np.uint8)
    media = {"text": ([], []), "image": ([], [img]), "video": ([clip(f, 1, t=6)], []),
             "videos": ([clip(f, 1), clip(f, 2, t=6)], []), "image_video": ([clip(f, 3)], [img])}[kind]
    text = {"text": "what is this?", "image": "<image>what is this?", "video": "<video>what happens?",
            "videos": "<video> then <video>: which?", "image_video": "<image> and <video>?"}[kind]
    prompt = ad.encode_prompt(text, videos=media[0], images=media[1])
    sent = vllm_prompt_ids(prompt, ad)
    assert sent == _template_ids(ad, text, len(media[0]), len(media[1]))
    assert sent.count(ad.image_pad_id) == len(media[1]) and sent.count(ad.video_pad_id) == len(media[0])
    if kind == "text":
        assert sent == prompt.input_ids


def test_buckets_stream_in_the_engine_dtype_in_order(tmp_path):
    emb = torch.randn(64, 16)
    weights = {"model.embed.weight": emb, "lm_head.weight": emb,  # tied: one storage
               "model.layers.0.a.weight": torch.randn(32, 32), "model.layers.0.b.bias": torch.randn(32),
               "model.steps": torch.tensor([3])}
    stats: dict[str, int] = {}
    seen = []
    for path in write_buckets(weights, tmp_path, dtype=torch.bfloat16, bucket_bytes=2048, stats=stats):
        assert len(list(tmp_path.iterdir())) == 1  # one bucket at a time
        with safe_open(str(path), framework="pt") as f:
            order = f.metadata()["order"].split("\n")
            assert sorted(order) == sorted(f.keys())
            for name in order:
                t = f.get_tensor(name)
                assert t.dtype == (torch.int64 if name == "model.steps" else torch.bfloat16)
                assert torch.equal(t, weights[name].to(t.dtype))
                seen.append(name)
        path.unlink()
    assert seen == list(weights)
    assert stats["tensors"] == 5
    assert stats["bytes"] == 2 * (2 * 64 * 16 + 32 * 32 + 32) + 8
    with pytest.raises(ValueError, match="given twice"):
        list(write_buckets([("a", emb), ("a", emb)], tmp_path, dtype=None))


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_text_after_a_video_starts_after_its_last_position(tmp_path, family):
    """The reference (and vLLM's) rule; transformers 5.19's differs once time outruns space."""
    from evr1.models.runtime import load_model

    model_dir = make_tiny(family, tmp_path / family, seed=0)
    ad, model = load_adapter(model_dir), load_model(model_dir)
    f = ad.video.factor
    for t, side, differs in ((8, f, True), (2, 4 * f, False)):
        prompt = ad.encode_prompt("<video>then?", videos=[clip(side // 2, 0, t=t)])
        batch = ad.collate([prompt])
        kw = dict(input_ids=batch.input_ids, mm_token_type_ids=batch.mm_token_type_ids,
                  attention_mask=batch.attention_mask,
                  **{k: batch.mm[k] for k in ("video_grid_thw", "second_per_grid_ts") if k in batch.mm})
        ours, _ = model.model.get_rope_index(**kw)
        theirs, _ = type(model.model).evr1_transformers_get_rope_index(model.model, **kw)
        video = (batch.mm_token_type_ids[0] == 2).nonzero().flatten()
        last, after = int(video[-1]), int(video[-1]) + 1
        assert (ours[:, 0, after] == ours[:, 0, video].max() + 1).all()
        assert torch.equal(ours[:, 0, : last + 1], theirs[:, 0, : last + 1])  # vision positions unchanged
        assert (not torch.equal(ours, theirs)) == differs


def test_tiny_models_for_vllm_and_prompt_dependent_weights(tmp_path):
    assert head_dim("qwen3_vl") == 16 and head_dim("qwen3_vl", **VLLM_SIZES) == 32
    drawn = make_tiny("qwen3_vl", tmp_path / "p", seed=2, init="prompt_dependent", **VLLM_SIZES)
    eng = HFEngine.from_pretrained(drawn, dtype=torch.float32, device="cpu")
    prompts = [eng.adapter.encode_prompt(q) for q in ("what color is it?", "how many frames?", "yes or no")]
    outs = eng.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.0))
    assert len({tuple(g[0].token_ids) for g in outs}) == 3  # every prompt its own answer
    with pytest.raises(ValueError, match="init"):
        make_tiny("qwen3_vl", tmp_path / "x", init="uniform")
    with pytest.raises(ValueError, match="divide"):
        make_tiny("qwen3_vl", tmp_path / "y", num_attention_heads=3)
