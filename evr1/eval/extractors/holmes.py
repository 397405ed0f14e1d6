"""Video-Holmes' official `extract_option` (VLMEvalKit `vlmeval/dataset/video_holmes.py`), §2.1.

Source behaviour: only the last `<answer>…</answer>` block counts (no tags → wrong); inside it, the
first letter X (in option order) written as "X ", "X:" or "[X"; else the first letter X (in option
order) appearing anywhere in the block. The letters are the item's own options (A–F).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_option(output: str, letters: Sequence[str]) -> str:
    """The option letter inside the last answer block, or ""."""
    blocks = _TAG.findall(output or "")
    if not blocks:
        return ""
    ans = blocks[-1].strip()
    for x in letters:
        if f"{x} " in ans or f"{x}:" in ans or f"[{x}" in ans:
            return x
    for x in letters:
        if x in ans:
            return x
    return ""
