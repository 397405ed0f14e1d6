"""Building blocks for official prompts: option lists, letter lists, subtitles, the thinking switch.

Benchmarks compose these in their `prompt` function, so each definition reads as the official
template it reproduces. The `<video>` placeholder is not written here: the model adapter puts the
video first in the user turn, as the official Qwen scripts and EasyVideoR1 do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evr1.eval.types import PromptContext

_REASONING = (re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE),
              re.compile(r"<analysis>.*?</analysis>", re.DOTALL | re.IGNORECASE))
_CLOSE = re.compile(r"</(?:think|analysis)>", re.IGNORECASE)

THINK_INSTRUCTION = ("Think step by step inside <think> </think> tags first, then give the final answer "
                     "after the closing tag in exactly the form asked for above.")


def letters_phrase(item: Mapping[str, Any]) -> str:
    """"A, B, C, or D" for the item's own options (the official templates hard-code four)."""
    ls = list(item.get("letters") or [])
    if len(ls) <= 1:
        return "".join(ls)
    if len(ls) == 2:
        return f"{ls[0]} or {ls[1]}"
    return ", ".join(ls[:-1]) + f", or {ls[-1]}"


def options_block(item: Mapping[str, Any], style: str = "{letter}. {text}", sep: str = "\n") -> str:
    """The options, relabelled in a benchmark's own style: "{letter}. {text}", "({letter}) {text}", …"""
    return sep.join(style.format(letter=l, text=t) for l, t in zip(item["letters"], item["option_texts"]))


def question(item: Mapping[str, Any]) -> str:
    """The question text, trimmed."""
    return str(item.get("problem") or "").strip()


def subtitles_block(ctx: PromptContext) -> str:
    """"This video's subtitles are listed below: …" (Video-MME's official wording), or nothing."""
    if not ctx.subtitles:
        return ""
    return f"This video's subtitles are listed below:\n{ctx.subtitles.strip()}\n"


def finish(text: str, ctx: PromptContext) -> str:
    """Add the subtitles and, with thinking on, the reasoning instruction (the answer form is unchanged)."""
    text = subtitles_block(ctx) + text
    return f"{text.rstrip()}\n{THINK_INSTRUCTION}" if ctx.thinking else text


def strip_reasoning(output: str) -> str:
    """The answer part of an output: reasoning blocks removed, and with only a closing tag (a template
    that pre-fills `<think>`) the text after the last one (lmms-eval's `--reasoning_tags` default)."""
    text = output
    for pat in _REASONING:
        text = pat.sub(" ", text)
    closes = list(_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    return text.strip()
