"""OVO-Bench's rules (§2.1), with the reference's substring bugs fixed.

- Backward / real-time multiple choice. Official: correct when the ground-truth letter is a
  case-sensitive *substring* of the response, so "A person…, so C" counts for A. Here: the response
  must name exactly one option letter — the whole response is the letter (with or without "." ":" "()"),
  or exactly one option letter stands alone in it, an "A" followed by a lower-case word being the
  article, not a choice.
- REC (counting): the official rule, unchanged: the concatenation of all digit runs equals the count.
- SSR / CRR (yes/no). Official: exactly "Y"/"N", else case-sensitive "Yes"/"No" ⊂ response ("yes" → 0,
  "Not sure" → "No"). Here: "Y"/"N", else the words yes / no, any case, as whole words; exactly one of
  the two must occur.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_EDGES = " \t\n.:;,()[]*\"'"
_ARTICLE = re.compile(r"\s+[a-z]")


def choice_letter(text: str, letters: Sequence[str]) -> str:
    """The one option letter the response names, or ""."""
    text = text or ""
    bare = text.strip(_EDGES)
    if bare in letters:
        return bare
    found = set()
    for m in re.finditer(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])", text):
        letter = m.group(1)
        if letter not in letters:
            continue
        if letter == "A" and _ARTICLE.match(text, m.end()):
            continue
        found.add(letter)
    return found.pop() if len(found) == 1 else ""


def digits(text: str) -> str:
    """The official REC reading: every digit run, concatenated."""
    return "".join(re.findall(r"\d+", text or ""))


def yes_no(text: str) -> str:
    """"YES", "NO", or "" when the response says neither or both."""
    bare = (text or "").strip(_EDGES)
    if bare in ("Y", "N"):
        return "YES" if bare == "Y" else "NO"
    words = set(re.findall(r"[a-z]+", (text or "").lower()))
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes == has_no:
        return ""
    return "YES" if has_yes else "NO"
