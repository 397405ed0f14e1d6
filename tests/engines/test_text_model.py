"""Text-only checkpoints (an LLM judge) load through the same engines: a tiny random-weight Qwen3 causal
LM with the tiny tokenizer, saved as an ordinary Hugging Face directory."""

from dataclasses import replace

import pytest
import torch

from evr1.engines import SamplingParams, make_engine
from evr1.models import make_tiny
from evr1.models.tiny import make_tiny_text
from evr1.models.text import TextAdapter, is_vision_language, load_any_adapter


@pytest.fixture(scope="module")
def text_model_dir(tmp_path_factory):
    return make_tiny_text(tmp_path_factory.mktemp("text")), make_tiny("qwen3_vl", tmp_path_factory.mktemp("vl"))


def test_a_text_model_gets_the_text_adapter_and_a_vl_model_the_vl_one(text_model_dir):
    text, vl = text_model_dir
    assert not is_vision_language(text) and is_vision_language(vl)
    adapter = load_any_adapter(text)
    assert isinstance(adapter, TextAdapter) and adapter.eos_token_ids and adapter.vision_token_ids == []
    assert load_any_adapter(vl).family.name == "qwen3_vl"


def test_hf_engine_generates_with_a_text_model(text_model_dir):
    from evr1.eval.judge import ChatPrompter

    text, _ = text_model_dir
    engine = make_engine("hf", model_dir=str(text), batch_size=2, device="cpu")
    prompter = ChatPrompter(text)
    prompts = [prompter("Is 2 + 2 = 4?"), prompter("Name a colour, briefly please.")]
    out = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=5, temperature=0.0, seed=0))
    assert len(out) == 2 and all(len(g[0].token_ids) <= 5 for g in out)
    again = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=5, temperature=0.0, seed=0))
    assert [g[0].token_ids for g in out] == [g[0].token_ids for g in again]  # greedy is deterministic


def test_per_prompt_seeds_sample_a_text_model_in_one_batch(text_model_dir):
    """The row-seeded sampler on a text-only model (an LLM judge's kind): no vision features go in,
    and each prompt's samples are its seed's whatever the batch."""
    from evr1.eval.judge import ChatPrompter

    text, _ = text_model_dir
    prompter = ChatPrompter(text)
    prompts = [prompter("Is 2 + 2 = 4?"), prompter("Name a colour, briefly please.")]
    params = SamplingParams(n=3, max_new_tokens=5, temperature=1.0, seeds=(7, 8))
    batched = make_engine("hf", model_dir=str(text), batch_size=2, device="cpu").generate(prompts, params)
    alone = make_engine("hf", model_dir=str(text), batch_size=1, device="cpu").generate(prompts[1:], replace(params, seeds=(8,)))
    assert [len(g) for g in batched] == [3, 3]
    assert [g.token_ids for g in batched[1]] == [g.token_ids for g in alone[0]]


def test_text_adapter_refuses_media(text_model_dir):
    from evr1.models.adapter import PromptInputs

    adapter = TextAdapter(text_model_dir[0])
    with pytest.raises(ValueError, match="text-only model"):
        adapter.collate([PromptInputs([1, 2], [0, 0], {"pixel_values": torch.zeros(1)}, "x")])


def test_presence_penalty_is_validated_and_refused_by_the_hf_engine(text_model_dir):
    from evr1.eval.judge import ChatPrompter

    with pytest.raises(ValueError, match="presence_penalty"):
        SamplingParams(presence_penalty=3.0)
    engine = make_engine("hf", model_dir=str(text_model_dir[0]), batch_size=1, device="cpu")
    with pytest.raises(ValueError, match="presence_penalty=1.5 has no transformers equivalent"):
        engine.generate([ChatPrompter(text_model_dir[0])("hi")], SamplingParams(max_new_tokens=2, presence_penalty=1.5))
