"""lmms-eval's multiple-choice extractors (§2.0 L1 and L2), ported from the source's behaviour.

L1 (`mcq_extract`, lmms-eval `_task_utils/mcq_extract.py`, commit 75571cf): strip the text, then
the characters `, . ! ? ; : ' "` from its ends (one kind at a time), pad it with spaces, collect
candidates by format with a priority each; the highest priority wins, then the latest position:

| format | priority | rule (letters are upper-case; no word boundaries are checked) |
| --- | --- | --- |
| start | 10 | the stripped text begins with a letter whose next character is not alphabetic |
| end | 9 | the stripped text ends with a letter whose previous character is not alphabetic |
| phrase | 7 | for the FIRST occurrence of each phrase of `PHRASES` (case-insensitive), the first occurrence of every letter after it, inside words too ("the answer is B, not C" → C) |
| (X) | 6 | last "(X)" |
| X. / X: / X) / "X " | 5 / 4 / 3 / 2 | last occurrence, inside words too ("USA." is an "A.") |
| fallback | 0 | the last occurrence of a letter anywhere, only when nothing else matched |

The letters are the ones the task passes (lmms-eval: A–D for LVBench and MLVU; MLVU's deviation
passes the item's six). "" means the rule stage could not decide (lmms-eval scores it wrong).

L2 (`classic`, lmms-eval's `extract_characters_regex` family): remove the given prefixes
(case-sensitive, in order), give up ("") on a text of more than 10 words without a letter, else the
first letter anywhere. Each task has its own prefix list (`PREFIXES`); VideoMathQA's copy lacks two
commas (adjacent string literals concatenate), LongVideoBench's and Video-MME-v2's have them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_EDGE = (",", ".", "!", "?", ";", ":", "'", '"')
PHRASES = ("the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
           "best answer is", "the correct option is", "correct option is", "the best option is", "best option is",
           "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select",
           "i pick", "my answer is", "my choice is",
           "옵션", "정답은", "답은", "답:",          # Korean
           "答案是", "答案为", "选",                 # Chinese
           "答えは")                                # Japanese
_TOKENS = ((6, "({})"), (5, "{}."), (4, "{}:"), (3, "{})"), (2, "{} "))


def mcq_extract(response: str, letters: Sequence[str]) -> str:
    """L1: the choice letter the answer names, or "" (see the module table)."""
    if not response or not response.strip() or not letters:
        return ""
    text = response.strip()
    for ch in _EDGE:
        text = text.strip(ch)
    text = f" {text} "
    found: list[tuple[int, int, str]] = []  # (priority, position, letter)
    for prio, token in _TOKENS:
        found += [(prio, text.rfind(token.format(c)), c) for c in letters if token.format(c) in text]
    low = text.lower()
    for phrase in PHRASES:
        at = low.find(phrase)
        if at >= 0:
            found += [(7, pos, c) for c in letters if (pos := text.find(c, at + len(phrase))) >= 0]
    core = text.strip()
    found += [(10, 0, c) for c in letters if core.startswith(c) and (len(core) == 1 or not core[1].isalpha())]
    found += [(9, len(text) - 1, c) for c in letters if core.endswith(c) and (len(core) == 1 or not core[-2].isalpha())]
    if not found:
        found = [(0, text.rfind(c), c) for c in letters if c in text]
    return max(found, key=lambda f: (f[0], f[1]))[2] if found else ""


# Each task's answer prefixes, as its source lists them (VideoMathQA's concatenations kept in `SOURCE_PREFIXES`).
LVB_PREFIXES = ("The best answer is", "The correct answer is", "The answer is", "The answer", "The best option is",
                "The correct option is", "Best answer:", "Best option:")
CLASSIC_PREFIXES = ("The best answer is", "The correct answer is", "The answer is", "The answer",
                    "The best option is", "The correct option is", "Final Answer:", "Best answer:",
                    "Best option:", "Answer:", "Option:")  # Video-MME-v2's list
SOURCE_PREFIXES = {
    "videomathqa": ("The best answer is", "The correct answer is", "The answer is", "The answer",
                    "The best option isThe correct option is", "Best answer:Best option:"),
}


def classic(response: str, letters: Sequence[str], *, prefixes: Sequence[str] = CLASSIC_PREFIXES) -> str:
    """L2: prefixes removed (case-sensitive), then the first choice letter anywhere; a text of more
    than 10 words with no choice letter is unreadable ("")."""
    if not letters:
        return ""
    s = (response or "").strip()
    for p in prefixes:
        s = s.replace(p, "")
    m = re.search("[" + "".join(re.escape(l) for l in letters) + "]", s)
    return m.group() if m else ""
