"""lmms-eval's MotionBench extractor (`lmms_eval/tasks/motionbench/utils.py`), §2.1.

Source behaviour: keep the text after `</think>`, upper-case it, remove answer prefixes ("THE BEST
ANSWER IS", "ANSWER:", …), then the first stand-alone letter A–F, then a letter followed by ".", ")"
or ":", then any letter A–F at all.

Fixes: no upper-casing of the whole text, so the article "a" is not the letter A ("The answer is a
cat" → "", the source gives A); a lone lower-case letter as the whole answer ("b") is still read.
The letters are the item's own options. Prefixes are removed case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PREFIXES = re.compile(r"the best answer is|the correct answer is|the answer is|the best option is|"
                       r"the correct option is|best answer:|best option:|answer:|option:", re.IGNORECASE)


def extract(output: str, letters: Sequence[str]) -> str:
    """The predicted letter among `letters`, or ""."""
    if not letters:
        return ""
    text = _PREFIXES.sub(" ", output or "").strip()
    if len(text.rstrip(".")) == 1 and text.rstrip(".").upper() in letters:
        return text.rstrip(".").upper()
    c = "[" + "".join(re.escape(l) for l in letters) + "]"
    for pat in (rf"\b({c})\b", rf"({c})[.):]", rf"({c})"):
        if m := re.search(pat, text):
            return m.group(1)
    return ""
