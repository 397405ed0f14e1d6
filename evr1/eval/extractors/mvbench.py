"""MVBench's official `check_ans` (OpenGVLab/Ask-Anything `mvbench.ipynb`, also VLMEvalKit's rule
stage for MVBench and MLVU).

Source behaviour: the prediction is lower-cased and its first space-separated token, with "." removed,
is the predicted option; it is right when it is a substring of the ground-truth option token "(c)",
or that token is a substring of it. So "(C) Piling…", "C) …", "C." and "c" are all read as (c).

Fix: an empty prediction (or a token with no letter, such as "(") is a substring of every option
token, so the source counts it as correct; here it is wrong.
"""

from __future__ import annotations


def check_ans(pred: str, gt_letter: str) -> bool:
    """True when the first token of `pred` names the option `gt_letter` (see the module docstring)."""
    tokens = (pred or "").strip().lower().split(" ")
    token = tokens[0].replace(".", "")
    if not any(ch.isalpha() for ch in token):
        return False
    gt = f"({gt_letter.lower()})"
    return token in gt or gt in token
