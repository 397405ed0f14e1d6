"""TempCompass' rule stage (lmms-eval `tempcompass/utils.py`, after the official `eval_*` scripts), §2.1.

Per task format, the rules that decide before the ChatGPT judge:
- multi-choice: the answer equals an option ("A. moving left") or its text, or is a bare letter, or
  starts with "X." / "X)" → that option;
- yes/no: the lower-cased answer starts with "yes" or "no";
- caption matching: the answer equals an option ("Caption A: …") or its text, or names it as
  "Caption/Sentence/Option X", or is a bare letter.

Deviation: no judge; what the rules cannot read is wrong ("").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_NAMED = re.compile(r"^(?:Caption|Sentence|Option)\s+([A-Z])\b")


def _exact(pred: str, item: Mapping[str, Any]) -> str:
    for letter, full, text in zip(item["letters"], item["options"], item["option_texts"]):
        if pred in (full.strip(), text):
            return letter
    return ""


def multi_choice(pred: str, item: Mapping[str, Any]) -> str:
    pred = (pred or "").strip()
    if hit := _exact(pred, item):
        return hit
    if pred in item["letters"]:
        return pred
    m = re.match(r"([A-Z])[.)]", pred)
    return m.group(1) if m and m.group(1) in item["letters"] else ""


def yes_no(pred: str, item: Mapping[str, Any]) -> str:
    low = (pred or "").strip().lower()
    return "yes" if low.startswith("yes") else "no" if low.startswith("no") else ""


def caption_matching(pred: str, item: Mapping[str, Any]) -> str:
    pred = (pred or "").strip()
    if hit := _exact(pred, item):
        return hit
    label = item.get("tc_label") or "Caption"
    for letter, text in zip(item["letters"], item["option_texts"]):
        if pred in (f"{label} {letter}: {text}", f"{label} {letter}"):
            return letter
    m = _NAMED.match(pred)
    if m and m.group(1) in item["letters"]:
        return m.group(1)
    bare = pred.rstrip(".")
    return bare if bare in item["letters"] else ""


RULES = {"multi-choice": multi_choice, "yes_no": yes_no, "caption_matching": caption_matching}
