"""Random-weight Qwen-VL-family checkpoints small enough for CPU tests and the demo.

The directory looks like a real checkpoint (config.json, safetensors, tokenizer files with a chat
template, generation_config.json, preprocessor_config.json, video_preprocessor_config.json), so
every stage loads it with the same code that loads `Qwen/Qwen3-VL-8B-Instruct`, offline.
Sizes follow stack-feasibility §3 (hidden 64, 2 layers, 4 heads, 2 KV heads, vision depth 1).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast

from evr1.models.families import FAMILIES, Family
from evr1.models.templates import QWEN2_VL_TEMPLATE, QWEN3_VL_TEMPLATE

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
DEFAULT_SIZES: dict[str, Any] = {
    "vocab_size": 640,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vision_depth": 1,
    "vision_hidden_size": 32,
    "vision_heads": 2,
    "max_position_embeddings": 8192,
}
# Sizes vLLM's CPU attention serves (head_dim ≥ 32; it supports 32, 64, 80, 96, 112, 128, …): the
# defaults' head_dim is 16. `make_tiny(fam, dir, **VLLM_SIZES)`.
VLLM_SIZES: dict[str, Any] = {"num_attention_heads": 2, "num_key_value_heads": 1}
# `init="prompt_dependent"`: every weight matrix re-drawn from N(0, this²). At transformers' default
# initializer range (0.02) a tiny model's greedy output is one token repeated whatever the prompt, so
# comparing two engines' greedy tokens on it proves nothing; at 0.15 the output follows the prompt
# (text, image and video alike) and fp32 log-probs keep clear margins between the top tokens.
PROMPT_DEPENDENT_STD = 0.15
INITS = ("default", "prompt_dependent")

# Words the demo's prompts, answers and reasoning use, so they tokenize into few tokens.
_WORDS = (
    "what which who where when why how many is are the a an of in on at to and or not this that video image "
    "frame frames scene person object objects color red green blue yellow white black square circle moving moves "
    "left right up down first last before after count answer question options option choose select correct "
    "please think step by carefully then provide final output your reasoning inside tags between seconds second "
    "time start end watch look describe shown appears happens there does do yes no true false number letter only"
).split()
_LETTERS = ["A", "B", "C", "D", "E"]


def _corpus(n: int = 600) -> list[str]:
    """Synthetic sentences in the shape of video QA prompts and answers (seed-independent)."""
    rng = random.Random(20261120)
    lines = []
    for _ in range(n):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 12)))
        kind = rng.randrange(6)
        if kind == 0:
            opts = " ".join(f"{c}. {rng.choice(_WORDS)} {rng.choice(_WORDS)}" for c in _LETTERS[: rng.randint(2, 5)])
            lines.append(f"Question: {words.capitalize()}? Options: {opts}")
        elif kind == 1:
            lines.append(f"<think>{words}.</think> <answer>{rng.choice(_LETTERS)}</answer>")
        elif kind == 2:
            lines.append(f"<answer>{rng.choice(['yes', 'no', str(rng.randint(0, 99))])}</answer>")
        elif kind == 3:
            lines.append(f"<{rng.randint(0, 30)}.{rng.randint(0, 9)} seconds> {words}")
        elif kind == 4:
            lines.append(f"{words.capitalize()}. Output the final answer in <answer> </answer> tags.")
        else:
            lines.append(f"{rng.randint(0, 1000)} {words} {rng.choice(_LETTERS)} {rng.randint(0, 9)}")
    return lines


def build_tokenizer(chat_template: str, vocab_size: int = DEFAULT_SIZES["vocab_size"]) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained here, carrying the Qwen special tokens and chat template."""
    tk = Tokenizer(models.BPE(unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=chat_template
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[3:]})
    return tok


def _mrope_section(head_dim: int) -> list[int]:
    """(t, h, w) rotary split summing to head_dim / 2, in Qwen's 2:3:3 proportion."""
    half = head_dim // 2
    hw = half * 3 // 8
    return [half - 2 * hw, hw, hw]


def _text_config(s: dict[str, Any], vocab: int, ids: dict[str, int], *, qwen3: bool) -> dict[str, Any]:
    """Qwen2/2.5/3-VL decoder config: mRoPE over the whole head."""
    head_dim = s["hidden_size"] // s["num_attention_heads"]
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": _mrope_section(head_dim)}
    cfg = dict(
        vocab_size=vocab,
        hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"],
        num_hidden_layers=s["num_hidden_layers"],
        num_attention_heads=s["num_attention_heads"],
        num_key_value_heads=s["num_key_value_heads"],
        max_position_embeddings=s["max_position_embeddings"],
        rope_parameters=rope,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
    )
    if qwen3:
        cfg["head_dim"] = head_dim
        rope["mrope_interleaved"] = True
    return cfg


def _text_qwen2(s: dict[str, Any], vocab: int, ids: dict[str, int]) -> dict[str, Any]:
    return _text_config(s, vocab, ids, qwen3=False)


def _text_qwen3(s: dict[str, Any], vocab: int, ids: dict[str, int]) -> dict[str, Any]:
    return _text_config(s, vocab, ids, qwen3=True)


def _text_qwen3_5(s: dict[str, Any], vocab: int, ids: dict[str, int]) -> dict[str, Any]:
    """Qwen3.5 hybrid decoder: alternating gated-delta-net (linear) and full attention layers; rotary
    on a quarter of each head (partial_rotary_factor 0.25, as the real models), so heads are 2× wider
    than hidden/heads to leave the mRoPE split a few dimensions."""
    head_dim = 2 * s["hidden_size"] // s["num_attention_heads"]
    cfg = _text_config(s, vocab, ids, qwen3=True)
    cfg["head_dim"] = head_dim
    cfg["rope_parameters"].update(partial_rotary_factor=0.25, mrope_section=_mrope_section(head_dim // 4))
    n = s["num_hidden_layers"]
    cfg.update(
        layer_types=["full_attention" if (i + 1) % 2 == 0 else "linear_attention" for i in range(n)],
        linear_key_head_dim=head_dim // 2,
        linear_value_head_dim=head_dim // 2,
        linear_num_key_heads=max(1, s["num_key_value_heads"]),
        linear_num_value_heads=s["num_attention_heads"],
    )
    return cfg


def _vision_qwen2(s: dict[str, Any], fam: Family) -> dict[str, Any]:
    return dict(
        depth=s["vision_depth"], embed_dim=s["vision_hidden_size"], hidden_size=s["hidden_size"],
        num_heads=s["vision_heads"], mlp_ratio=2, patch_size=fam.patch_size,
        spatial_merge_size=fam.merge_size, temporal_patch_size=fam.temporal_patch_size,
    )


def _vision_qwen2_5(s: dict[str, Any], fam: Family) -> dict[str, Any]:
    return dict(
        depth=s["vision_depth"], hidden_size=s["vision_hidden_size"], intermediate_size=2 * s["vision_hidden_size"],
        num_heads=s["vision_heads"], out_hidden_size=s["hidden_size"], patch_size=fam.patch_size,
        spatial_merge_size=fam.merge_size, temporal_patch_size=fam.temporal_patch_size,
        window_size=fam.patch_size * fam.merge_size * 4, fullatt_block_indexes=[s["vision_depth"] - 1],
        tokens_per_second=2,
    )


def _vision_qwen3(s: dict[str, Any], fam: Family) -> dict[str, Any]:
    return dict(
        depth=s["vision_depth"], hidden_size=s["vision_hidden_size"], intermediate_size=2 * s["vision_hidden_size"],
        num_heads=s["vision_heads"], out_hidden_size=s["hidden_size"], patch_size=fam.patch_size,
        spatial_merge_size=fam.merge_size, temporal_patch_size=fam.temporal_patch_size,
        num_position_embeddings=64, deepstack_visual_indexes=[s["vision_depth"] - 1],
    )


TextBuilder = Callable[[dict[str, Any], int, dict[str, int]], dict[str, Any]]
VisionBuilder = Callable[[dict[str, Any], Family], dict[str, Any]]
# family → (text config builder, vision config builder, chat template, processor-config layout).
# Qwen3.5 gets the Qwen3-VL template (its own adds thinking switches the tiny model does not need).
_BUILDERS: dict[str, tuple[TextBuilder, VisionBuilder, str, str]] = {
    "qwen2_vl": (_text_qwen2, _vision_qwen2, QWEN2_VL_TEMPLATE, "pixels"),
    "qwen2_5_vl": (_text_qwen2, _vision_qwen2_5, QWEN2_VL_TEMPLATE, "pixels"),
    "qwen3_vl": (_text_qwen3, _vision_qwen3, QWEN3_VL_TEMPLATE, "size"),
    "qwen3_5": (_text_qwen3_5, _vision_qwen3, QWEN3_VL_TEMPLATE, "size"),
}


def _processor_configs(fam: Family, layout: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(preprocessor_config.json, video_preprocessor_config.json) in the layout real checkpoints use.

    Budgets are small (images 4–64 merged tokens, video frames 4–64 merged tokens) to keep tests fast.
    """
    f2 = fam.factor**2
    common = {
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": list(fam.image_mean), "image_std": list(fam.image_std),
        "merge_size": fam.merge_size, "patch_size": fam.patch_size, "temporal_patch_size": fam.temporal_patch_size,
        "resample": 3, "rescale_factor": 1 / 255, "processor_class": fam.processor_class,
    }
    image = {**common, "image_processor_type": "Qwen2VLImageProcessor"}
    video = {**common, "video_processor_type": fam.video_processor_type, "do_sample_frames": False}
    if layout == "pixels":  # Qwen2-VL / Qwen2.5-VL ship min_pixels / max_pixels
        image.update(min_pixels=4 * f2, max_pixels=64 * f2)
        video.update(min_pixels=4 * f2, max_pixels=64 * f2)
    else:  # Qwen3-VL ships size.shortest_edge / longest_edge
        image["size"] = {"shortest_edge": 4 * f2, "longest_edge": 64 * f2}
        video.update(size={"shortest_edge": 4 * f2, "longest_edge": 64 * f2}, fps=2, min_frames=4, max_frames=768)
    return image, video


def head_dim(family: str, **size_overrides: Any) -> int:
    """The decoder's attention head size `make_tiny(family, ..., **size_overrides)` builds."""
    sizes = {**DEFAULT_SIZES, **size_overrides}
    per_head = sizes["hidden_size"] // sizes["num_attention_heads"]
    return 2 * per_head if family == "qwen3_5" else per_head


def _redraw(model: torch.nn.Module, std: float, seed: int) -> None:
    """Every weight matrix (≥ 2-D floating parameter) from N(0, std²), seeded; norms and biases kept."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.dim() >= 2 and p.is_floating_point():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * std)


def make_tiny(family: str, out_dir: str | PathLike, *, seed: int = 0, init: str = "default",
              **size_overrides: Any) -> Path:
    """Write a random-weight checkpoint of `family` to `out_dir` and return the directory.

    Deterministic for a seed: the same seed and sizes give byte-identical files. `size_overrides`
    may change any key of `DEFAULT_SIZES` (e.g. `hidden_size=128, num_hidden_layers=4`;
    `**VLLM_SIZES` for a model vLLM's CPU attention runs). `init="prompt_dependent"` re-draws the
    weight matrices so that greedy outputs depend on the prompt (see `PROMPT_DEPENDENT_STD`).
    """
    if family not in _BUILDERS:
        raise ValueError(f"make_tiny: family {family!r} is not buildable (choose from {sorted(_BUILDERS)})")
    if init not in INITS:
        raise ValueError(f"make_tiny: field init has invalid value {init!r} (choose from {list(INITS)})")
    bad = {k: v for k, v in size_overrides.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1}
    if bad:
        raise ValueError(f"make_tiny: size overrides must be positive integers, got {bad}")
    unknown = set(size_overrides) - set(DEFAULT_SIZES)
    if unknown:
        raise ValueError(f"make_tiny: unknown size overrides {sorted(unknown)} (known: {sorted(DEFAULT_SIZES)})")
    sizes = {**DEFAULT_SIZES, **size_overrides}
    for heads in ("num_attention_heads", "vision_heads"):
        width = sizes["hidden_size" if heads == "num_attention_heads" else "vision_hidden_size"]
        if width % sizes[heads]:
            raise ValueError(f"make_tiny: {heads}={sizes[heads]} does not divide its hidden size {width}")
    if sizes["num_attention_heads"] % sizes["num_key_value_heads"]:
        raise ValueError(f"make_tiny: num_key_value_heads={sizes['num_key_value_heads']} does not divide "
                         f"num_attention_heads={sizes['num_attention_heads']}")
    fam = FAMILIES[family]
    text_builder, vision_builder, template, layout = _BUILDERS[family]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(template, sizes["vocab_size"])
    tid = tok.convert_tokens_to_ids
    ids = {"bos": tid("<|endoftext|>"), "eos": tid("<|im_end|>"), "pad": tid("<|endoftext|>")}
    config = getattr(transformers, fam.config_class)(
        text_config=text_builder(sizes, len(tok), ids),
        vision_config=vision_builder(sizes, fam),
        image_token_id=tid("<|image_pad|>"),
        video_token_id=tid("<|video_pad|>"),
        vision_start_token_id=tid("<|vision_start|>"),
        vision_end_token_id=tid("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, fam.model_class)(config)
    if init == "prompt_dependent":
        _redraw(model, PROMPT_DEPENDENT_STD, seed)
    # Real Qwen checkpoints stop on <|im_end|> or <|endoftext|> and pad with <|endoftext|>.
    model.generation_config = GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=[ids["eos"], tid("<|endoftext|>")], pad_token_id=ids["pad"]
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    image_cfg, video_cfg = _processor_configs(fam, layout)
    (out / "preprocessor_config.json").write_text(json.dumps(image_cfg, indent=2, sort_keys=True) + "\n")
    (out / "video_preprocessor_config.json").write_text(json.dumps(video_cfg, indent=2, sort_keys=True) + "\n")
    return out


def make_tiny_text(out_dir: str | PathLike, *, seed: int = 0) -> Path:
    """A random-weight text-only Qwen3 causal LM with the tiny tokenizer (an offline stand-in for an
    LLM judge such as Qwen3-32B), saved as an ordinary Hugging Face directory."""
    import shutil
    import tempfile

    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        vl = make_tiny("qwen3_vl", Path(tmp) / "vl", seed=seed)
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
            if (vl / name).exists():
                shutil.copy(vl / name, out / name)
        vocab = len(AutoTokenizer.from_pretrained(str(vl)))
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512)
    Qwen3ForCausalLM(cfg).save_pretrained(out)
    return out
