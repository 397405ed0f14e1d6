"""Prompt length in tokens, checked at ingestion and again when a prompt is built (`data.max_prompt_tokens`).

Why: one 10 MB or 20,000-character `problem` grew a rollout worker by gigabytes and ran past the
model's positions. Counting must itself be cheap on such input, so the text is never tokenized
when its size already decides: byte-level BPE (every Qwen tokenizer) gives at most one token per
UTF-8 byte, and at least one token per `longest_token_bytes`. Only in between is the text
tokenized with the model's own tokenizer.

At ingestion the record's text (problem and options) is measured; its media's vision tokens depend
on the decoded frames and are added when the prompt is built, where `check_prompt_tokens` sees the
exact length of the encoded prompt (text plus vision tokens, the model family's rules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHAT_OVERHEAD = 32  # tokens the chat template and the family template add around the question, at least


class PromptTooLong(ValueError):
    """A prompt over the limit; the message names the record, its length and the limit."""


@dataclass(frozen=True)
class Measure:
    """A prompt's length: `tokens` exact, or a lower bound when `exact` is False (too big to tokenize)."""

    tokens: int
    exact: bool
    nbytes: int

    def describe(self) -> str:
        size = f"{self.nbytes:,} bytes"
        return f"{self.tokens} tokens ({size})" if self.exact else f"at least {self.tokens:,} tokens ({size})"


@dataclass(frozen=True)
class PromptLimit:
    """`max_tokens` and the model's text counter; `fixed_tokens` is added to every prompt (template)."""

    max_tokens: int
    count_text: Callable[[str], int]
    longest_token_bytes: int = 64
    fixed_tokens: int = CHAT_OVERHEAD

    def measure(self, texts: Iterable[str]) -> Measure | None:
        """The length of `texts` as one prompt when it is over the limit, else None (it fits)."""
        text = "\n".join(texts)
        nbytes = len(text.encode("utf-8", "surrogatepass"))
        budget = self.max_tokens - self.fixed_tokens
        if nbytes <= budget:
            return None  # at most one token per byte: fits without tokenizing
        lower = -(-nbytes // self.longest_token_bytes)
        if lower > budget:
            return Measure(lower + self.fixed_tokens, False, nbytes)
        tokens = self.count_text(text) + self.fixed_tokens
        return Measure(tokens, True, nbytes) if tokens > self.max_tokens else None

    def reason(self, measure: Measure) -> str:
        return f"prompt is {measure.describe()}, over data.max_prompt_tokens = {self.max_tokens}"


def record_texts(problem: str, options: Iterable[str] = ()) -> list[str]:
    """The parts of a record that become prompt text."""
    return [problem, *options]


def effective_limit(max_prompt_tokens: int, model_positions: int | None, max_new_tokens: int) -> int:
    """`data.max_prompt_tokens`, lowered so that prompt plus response fit in the model's positions."""
    if model_positions is None:
        return max_prompt_tokens
    return max(1, min(max_prompt_tokens, model_positions - max_new_tokens))


def tokenizer_limit(tokenizer: Any, max_tokens: int) -> PromptLimit:
    """A PromptLimit counting with a Hugging Face tokenizer (no special tokens: the template adds them)."""
    # Byte-level BPE writes each byte as one character of its vocabulary: a token's length in
    # characters is its length in bytes (added tokens are longer, which only lowers the bound).
    longest = max(map(len, tokenizer.get_vocab()), default=64)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return PromptLimit(max_tokens, count, max(1, longest))


def model_positions(model_dir: str | Path) -> int | None:
    """`max_position_embeddings` of a checkpoint folder (text config first), or None."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for section in (config.get("text_config") or {}, config):
        value = section.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_prompt_tokens(n_tokens: int, max_tokens: int | None, record: str = "prompt") -> None:
    """Raise PromptTooLong when an encoded prompt (text plus vision tokens) is over the limit."""
    if max_tokens is not None and n_tokens > max_tokens:
        raise PromptTooLong(f"{record}: prompt is {n_tokens} tokens (text plus vision), over data.max_prompt_tokens "
                            f"= {max_tokens}")


def limit_for_config(cfg: Any) -> PromptLimit:
    """The run's limit: its model's tokenizer (the tiny family's, built offline, when no model.path)
    and `data.max_prompt_tokens` capped by the model's positions less `rollout.max_new_tokens`."""
    if cfg.model.path and not (Path(cfg.model.path) / "config.json").exists():
        # The model is not there yet (a later stage or a retry provides it): only what the text's
        # size alone proves over the limit is rejected here; the exact check runs when the prompt is built.
        return PromptLimit(cfg.data.max_prompt_tokens, lambda text: 0)
    if cfg.model.path:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
        positions = model_positions(cfg.model.path)
    else:
        from evr1.models import tiny

        template = tiny._BUILDERS[cfg.model.tiny.family][2]
        tokenizer = tiny.build_tokenizer(template, tiny.DEFAULT_SIZES["vocab_size"])
        positions = tiny.DEFAULT_SIZES["max_position_embeddings"]
    limit = effective_limit(cfg.data.max_prompt_tokens, positions, cfg.rollout.max_new_tokens)
    return tokenizer_limit(tokenizer, limit)


def refuse_by_size(text: str, max_tokens: int | None, longest_token_bytes: int, record: str = "prompt") -> None:
    """Raise PromptTooLong, before tokenizing, when `text`'s size alone proves it over the limit."""
    if max_tokens is None:
        return
    nbytes = len(text.encode("utf-8", "surrogatepass"))
    lower = -(-nbytes // max(1, longest_token_bytes))
    if lower > max_tokens:
        raise PromptTooLong(f"{record}: prompt is {Measure(lower, False, nbytes).describe()}, over "
                            f"data.max_prompt_tokens = {max_tokens}")
