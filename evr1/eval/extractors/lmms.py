"""lmms-eval's multiple-choice extractors (§2.0 L1 and L2), with the reference document's bugs fixed.

L1 (`mcq_extract`, lmms-eval `_task_utils/mcq_extract.py` as of the reference snapshot): strip the
text and the characters `,.!?;:'"` from its ends, pad it with spaces, collect candidate letters by
format with a priority each, and return the highest priority, then the latest position:

| format | priority | rule |
| --- | --- | --- |
| start | 10 | the text begins with a choice letter not followed by a letter |
| end | 9 | the text ends with a choice letter not preceded by a letter |
| phrase | 7 | the first stand-alone choice letter after a phrase ("the answer is", "i choose", 答案是, …) |
| (X) | 6 | last occurrence |
| X. / X: / X) / "X " | 5 / 4 / 3 / 2 | last occurrence, the letter not preceded by a letter |
| fallback | 0 | the last occurrence of a choice letter anywhere, only when nothing else matched |

Phrases match case-insensitively; letters are upper-case only. Fix: the choice letters are the
item's own options (lmms-eval passes A–D to MLVU, whose test split has six, so "E" read as "").

L2 (`classic`, lmms-eval/VLMEvalKit `extract_characters_regex`): remove answer prefixes, give up on
a long answer without a choice letter, else return the first choice letter anywhere. Fixes: the
prefix list has its missing commas back ("Best option:(D) …" → D, not B) and "Answer:", "Option:"
and "Final Answer:" are removed ("Answer: C" → C, not A); the letters are the item's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_EDGE = ",.!?;:'\""
PHRASES = ("the answer is", "answer is", "best answer is", "correct answer is", "the best option is",
           "best option is", "i choose", "i select", "i pick", "答案是")


def _cls(letters: Sequence[str]) -> str:
    return "[" + "".join(re.escape(l) for l in letters) + "]"


def mcq_extract(response: str, letters: Sequence[str]) -> str:
    """L1: the choice letter the answer names, or "" (see the module table)."""
    if not letters:
        return ""
    text = " " + (response or "").strip().strip(_EDGE).strip() + " "
    c = _cls(letters)
    found: list[tuple[int, int, str]] = []  # (priority, position, letter)
    if m := re.match(rf"\s*({c})(?![A-Za-z])", text):
        found.append((10, m.start(1), m.group(1)))
    if m := re.search(rf"(?<![A-Za-z])({c})\s*$", text):
        found.append((9, m.start(1), m.group(1)))
    low = text.lower()
    lone = re.compile(rf"(?<![A-Za-z])({c})(?![A-Za-z])")
    for phrase in PHRASES:
        at = low.find(phrase)
        if at >= 0 and (m := lone.search(text, at + len(phrase))):
            found.append((7, m.start(1), m.group(1)))
    for prio, pat in ((6, rf"\(({c})\)"), (5, rf"(?<![A-Za-z])({c})\."), (4, rf"(?<![A-Za-z])({c}):"),
                      (3, rf"(?<![A-Za-z(])({c})\)"), (2, rf"(?<![A-Za-z])({c}) ")):
        hits = list(re.finditer(pat, text))
        if hits:
            found.append((prio, hits[-1].start(1), hits[-1].group(1)))
    if not found:
        hits = list(re.finditer(c, text))
        if hits:
            found.append((0, hits[-1].start(), hits[-1].group()))
    return max(found)[2] if found else ""


CLASSIC_PREFIXES = ("The best answer is", "The correct answer is", "The answer is", "The answer",
                    "The best option is", "The correct option is", "Final Answer:", "Best answer:",
                    "Best option:", "Answer:", "Option:")


def classic(response: str, letters: Sequence[str], *, prefixes: Sequence[str] = CLASSIC_PREFIXES) -> str:
    """L2: prefixes removed (case-sensitive), then the first choice letter anywhere; a text of more
    than 10 words with no choice letter is unreadable ("")."""
    if not letters:
        return ""
    s = (response or "").strip()
    for p in prefixes:
        s = s.replace(p, "")
    m = re.search(_cls(letters), s)
    return m.group() if m else ""
