"""A strict letter extractor for benchmarks with no official rule (ODV-Bench, LiveSports-3K QA,
LongVideo-Reason): our own, documented, restricted to the item's options.

Order: (1) the last `<answer>…</answer>` block, if present, decides alone; (2) else the last
final-answer phrase ("final answer is", "answer:", "the correct option is", …; phrase in any case,
letter upper-case); (3) else the whole answer is one option label: "B", "(B)", "B.", "**B**",
"B. text", "B: text", "(B) text". Anything else is unreadable (""), so it scores 0 — never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_PHRASE = re.compile(r"(?:final answer|correct answer|best answer|answer|correct option|best option|option)"
                     r"\s*(?:is\s*:?|:)\s*[*(\[]*\s*([A-Z])(?![A-Za-z])", re.IGNORECASE)
_LABEL = re.compile(r"^[*\s]*[(\[]?\s*([A-Z])\s*[)\]]?\s*[.:)]?[*\s]*(?:(?<=[.:)\]*])\s*\S.*)?$", re.DOTALL)


def lone_letter(text: str, letters: Sequence[str]) -> str:
    """The letter when the text is one option label, alone or followed by the option's text."""
    t = text.strip().rstrip(".")
    m = _LABEL.match(t)
    return m.group(1) if m and m.group(1) in letters else ""


def strict_letter(output: str, letters: Sequence[str]) -> str:
    """The chosen letter of `output` among `letters`, or "" (see the module docstring)."""
    text = output or ""
    tags = _TAG.findall(text)
    if tags:
        inner = tags[-1].strip()
        return lone_letter(inner, letters) or _phrase(inner, letters)
    return _phrase(text, letters) or lone_letter(text, letters)


def _phrase(text: str, letters: Sequence[str]) -> str:
    hits = [m.group(1) for m in _PHRASE.finditer(text)]
    hits = [h for h in hits if h.isupper()]
    return hits[-1] if hits and hits[-1] in letters else ""
