"""Final-answer reading and rule scoring for open-ended items, before the LLM judge.

The official protocols of MMVU, VCR-Bench and VideoReasonBench grade open answers with a GPT judge.
Here the rules decide what they can: the model's final answer (the text after the last
"final answer is:" / "Final Answer:" marker, else the whole answer) is normalised and compared with
the ground truth; equal → 1 (lmms-eval MMVU's first rule). Anything else is left to the judge pass
(`evr1/eval/judge.py`): the result says `needs_judge` and carries the final answer as `pred`.
Multiple-choice items of the same benchmarks read the final answer with VLMEvalKit's rule stage (V1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evr1.eval.extractors.vlmevalkit import infer
from evr1.eval.scoring import undecided

_FINAL = re.compile(r"final[\s*_]+answer[\s*]*(?:is)?[\s*]*[:：]", re.IGNORECASE)
_ANSWER_LABEL = re.compile(r"^\s*(?:\*\*)?answer(?:\*\*)?\s*[:：]", re.IGNORECASE)
_SUPERSCRIPTS = str.maketrans({"²": "^2", "³": "^3", "¹": "^1", "⁰": "^0", "⁴": "^4", "⁵": "^5", "⁶": "^6",
                               "⁷": "^7", "⁸": "^8", "⁹": "^9"})
_EDGE = " \t\n.,;:!?\"'*`$"


def final_answer(text: str) -> str:
    """The text after the last final-answer marker ("Therefore, the final answer is:", "Final Answer:"),
    without a leading "Answer:" label or surrounding quotes and markup; else the whole text, trimmed."""
    text = text or ""
    marks = list(_FINAL.finditer(text))
    if marks:
        text = text[marks[-1].end():]
    text = _ANSWER_LABEL.sub("", text, count=1)
    return text.strip(_EDGE).strip()


def normalise(text: str) -> str:
    """Lower case, superscripts as ^n (lmms-eval MMVU), single spaces, no edge punctuation."""
    text = str(text).translate(_SUPERSCRIPTS).lower()
    return " ".join(text.split()).strip(_EDGE)


def open_ended(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """1 when the normalised final answer equals the normalised ground truth; else 0 pending the judge."""
    pred = final_answer(output)
    if pred and normalise(pred) == normalise(item["gt"]):
        return {"score": 1.0, "pred": pred}
    return {"score": 0.0, "pred": pred, "needs_judge": True}


def choice(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """A multiple-choice item: V1 (option letter, then option text) on the final answer."""
    pred = infer(final_answer(output), item["letters"], item["option_texts"])
    return {"score": 1.0 if pred and pred == item["gt"] else 0.0, "pred": pred, **undecided(not pred)}


def needs_judge(item: Mapping[str, Any]) -> bool:
    """Open-ended items are the ones the LLM judge re-scores."""
    return item["problem_type"] == "open-ended"
