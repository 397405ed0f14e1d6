"""VLMEvalKit / official Qwen3-VL rule stage (`can_infer_option` + `can_infer_text`), §2.0 V1.

Source behaviour: punctuation `.()[],:;!*#{}` becomes spaces; a single choice letter among the tokens
wins, unless it is "A" and there are more than 3 tokens (the article "a" guard); else the one option
whose lower-cased text appears in the answer; else an LLM judge maps the answer to a letter.

An unresolved answer is "" here: the scorer marks it `undecided`, and evr1's configured LLM judge
decides it when `eval.judge.enabled` (else it is wrong); no random pick after 25 failures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PUNCT = re.compile(r"[.()\[\],:;!*#{}]")


def can_infer_option(answer: str, letters: Sequence[str]) -> str:
    """The single choice letter standing alone among the answer's tokens, else ""."""
    tokens = _PUNCT.sub(" ", answer).split()
    found = [l for l in letters if l in tokens]
    if len(found) == 1:
        if found[0] == "A" and len(tokens) > 3:
            return ""
        return found[0]
    return ""


def can_infer_text(answer: str, letters: Sequence[str], texts: Sequence[str]) -> str:
    """The letter of the one option whose text appears (case-insensitively) in the answer, else ""."""
    low = answer.lower()
    hits = [l for l, t in zip(letters, texts) if t and t.lower() in low]
    return hits[0] if len(hits) == 1 else ""


def infer(answer: str, letters: Sequence[str], texts: Sequence[str]) -> str:
    """V1 without the judge: option letter, then option text."""
    return can_infer_option(answer, letters) or can_infer_text(answer, letters, texts)
