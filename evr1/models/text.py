"""Text-only checkpoints (an LLM judge such as Qwen3-32B): the adapter subset the engines use.

`load_any_adapter` returns the Qwen-VL adapter for a vision-language directory and a `TextAdapter`
otherwise, so `make_engine("hf" | "vllm", model_dir=…)` serves both kinds: prompts are built by the
caller (`PromptInputs` without media), eos/pad ids come from the tokenizer and generation config,
and no vision token needs suppressing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from evr1.models.adapter import ModelBatch, PromptInputs, VisionLanguageAdapter, load_adapter
from evr1.models.families import family_of


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


@dataclass
class TextBatch(ModelBatch):
    """A left-padded text batch: the model gets ids and the attention mask only."""

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}


class TextAdapter:
    """Tokenizer, chat template, eos and pad ids of a text-only checkpoint (never loads weights)."""

    family = None
    vision_token_ids: list[int] = []

    def __init__(self, model_dir: str | PathLike) -> None:
        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self.chat_template = self.tokenizer.chat_template
        gen_path = self.model_dir / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
        self.eos_token_ids = list(dict.fromkeys(_ids(self.tokenizer.eos_token_id) + _ids(gen.get("eos_token_id"))))
        if not self.eos_token_ids:
            raise ValueError(f"{self.model_dir}: tokenizer and generation_config.json define no eos_token_id")
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else gen.get("pad_token_id", self.eos_token_ids[0]))

    def collate(self, prompts: Sequence[PromptInputs], responses: Sequence[Sequence[int]] | None = None) -> TextBatch:
        if not prompts:
            raise ValueError("collate: no prompts")
        if any(p.mm for p in prompts):
            raise ValueError(f"{self.model_dir} is a text-only model: prompts must not carry media")
        responses = responses if responses is not None else [[] for _ in prompts]
        lp, lr, b = max(len(p) for p in prompts), max((len(r) for r in responses), default=0), len(prompts)
        ids = torch.full((b, lp + lr), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((b, lp + lr), dtype=torch.long)
        response_mask = torch.zeros((b, lr), dtype=torch.long)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            ids[i, lp - len(p) : lp] = torch.tensor(p.input_ids, dtype=torch.long)
            attention[i, lp - len(p) : lp + len(r)] = 1
            if len(r):
                ids[i, lp : lp + len(r)] = torch.as_tensor(list(r), dtype=torch.long)
                response_mask[i, : len(r)] = 1
        return TextBatch(ids, attention, torch.zeros_like(ids), {}, response_mask, lp)

    def decode(self, token_ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(token_ids, torch.Tensor):
            token_ids = token_ids.tolist()
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def is_vision_language(model_dir: str | PathLike) -> bool:
    """True for a Qwen-VL family directory (its config.json names a known model type)."""
    try:
        family_of(model_dir)
    except ValueError:
        return False
    return True


def load_any_adapter(model_dir: str | PathLike) -> VisionLanguageAdapter | TextAdapter:
    """The Qwen-VL adapter for a vision-language directory, else a `TextAdapter`."""
    return load_adapter(model_dir) if is_vision_language(model_dir) else TextAdapter(model_dir)
