"""lmms-eval's MINERVA extractor (`lmms_eval/tasks/minerva/utils.py`, commit 75571cf), §2.1.

Source behaviour, ported: the LAST match of "answer|option", then "is" or ":", then a letter A–E,
the whole pattern case-insensitive (so "The answer is b" → B, and also "the answer is a cat" → A,
"answer: because" → B: the letter needs no word boundary); else remove MINERVA's own six answer
prefixes (case-sensitive) and take the LAST capital A–E anywhere in the text (an echoed option text
with capitals can win). The letters are A–E (every MINERVA item has five options).

The source picks a random letter when nothing is found; here "" is returned (the rule stage could
not decide: the answer is wrong, or goes to the LLM judge when it is enabled).
"""

from __future__ import annotations

import re

LETTERS = "ABCDE"
PREFIXES = ("The best answer is", "The correct answer is", "The answer is", "Answer:", "Option:",
            "Therefore, the final answer is:")
_DECLARED = re.compile(rf"(?:answer|option)\s*(?:is|:)\s*([{LETTERS}])", re.IGNORECASE)


def extract(output: str) -> str:
    """The predicted letter (upper case), or "" when the source would pick one at random."""
    text = str(output or "").strip()
    declared = _DECLARED.findall(text)
    if declared:
        return declared[-1].upper()
    for p in PREFIXES:
        text = text.replace(p, "")
    hits = re.findall(f"[{LETTERS}]", text)
    return hits[-1] if hits else ""
