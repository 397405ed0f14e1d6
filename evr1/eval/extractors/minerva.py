"""lmms-eval's MINERVA extractor (`lmms_eval/tasks/minerva/utils.py`), §2.1.

Source behaviour: the last "answer is X" / "answer: X" / "option is X" / "option: X" match (phrase in
any case, letter upper-case, optionally in brackets); else remove the answer prefixes and take the
last capital choice letter anywhere in the text (so an echoed option text with capitals can win);
nothing → a random letter.

Fixes: no random letter (an unreadable answer is wrong, ""); the letters are the item's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from evr1.eval.extractors.lmms import CLASSIC_PREFIXES


def extract(output: str, letters: Sequence[str]) -> str:
    """The predicted letter among `letters`, or ""."""
    if not letters:
        return ""
    text = output or ""
    c = "[" + "".join(re.escape(l) for l in letters) + "]"
    decl = [m.group(1) for m in re.finditer(rf"(?i:answer|option)\s*(?i:is|:)\s*[(\[]?\s*({c})(?![A-Za-z])", text)]
    if decl:
        return decl[-1]
    for p in CLASSIC_PREFIXES:
        text = text.replace(p, "")
    hits = re.findall(c, text)
    return hits[-1] if hits else ""
