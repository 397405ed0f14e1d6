"""Published numbers to set our results beside (`../shared/reference/eval-benchmarks.md` §3).

Values are percentages. `official` rows are the model builders' numbers (the source of each is in
`SOURCES`; "recall" marks a number quoted from memory in the reference document, not found in a
stored source). `easyvideor1` rows are the reference project's Figure 2 read from pixels (±0.3) and
are comparable with our `easyvideor1` profile, which reproduces its scorer and its metric
(`mean_acc`); they are not the official metric where the two differ (MLVU test micro vs dev M-Avg,
VideoMathQA's 2100-item micro vs MBin).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    value: float              # percent
    source: str
    profile: str = "official"  # which of our profiles computes the comparable number


R = Reference
_Q3I, _Q3T, _Q25 = "qwen3-vl-8b-instruct", "qwen3-vl-8b-thinking", "qwen2.5-vl-7b"
_EVR = "EasyVideoR1 report Fig. 2"

# benchmark → model → [references]
NUMBERS: dict[str, dict[str, list[Reference]]] = {
    "videomme": {_Q3I: [R(71.4, "QwenLM/Qwen3-VL#1772 (w/o sub; medium certainty)"), R(69.4, _EVR, "easyvideor1")],
                 _Q3T: [R(69.8, _EVR, "easyvideor1")], _Q25: [R(65.1, "recall (w/o sub; 71.6 w/ sub)")]},
    "mvbench": {_Q3I: [R(67.5, _EVR, "easyvideor1")], _Q3T: [R(69.6, _EVR, "easyvideor1")],
                _Q25: [R(69.6, "QwenLM/Qwen3-VL#1029 quoting the tech report (20 tasks)")]},
    "tempcompass": {_Q3I: [R(76.5, _EVR, "easyvideor1")], _Q3T: [R(78.7, _EVR, "easyvideor1")], _Q25: [R(71.7, "recall")]},
    "lvbench": {_Q3I: [R(58.0, "QwenLM/Qwen3-VL#2057 citing the HF model card"), R(55.4, _EVR, "easyvideor1")],
                _Q3T: [R(53.6, _EVR, "easyvideor1")], _Q25: [R(45.3, "QwenLM/Qwen3-VL#1772")]},
    "longvideobench": {_Q3I: [R(61.4, _EVR, "easyvideor1")], _Q3T: [R(65.3, _EVR, "easyvideor1")], _Q25: [R(56.0, "recall")]},
    "mlvu-test": {_Q3I: [R(65.7, _EVR + " (test split, micro accuracy)", "easyvideor1")],
                  _Q3T: [R(66.9, _EVR + " (test split, micro accuracy)", "easyvideor1")]},
    "mlvu-dev": {_Q25: [R(70.2, "recall (dev M-Avg)")]},
    "holmes": {_Q3I: [R(43.6, _EVR, "easyvideor1")], _Q3T: [R(43.9, _EVR, "easyvideor1")]},
    "mmvu-mc": {_Q3I: [R(69.6, _EVR + " (625 MC items)", "easyvideor1")], _Q3T: [R(71.9, _EVR + " (625 MC items)", "easyvideor1")]},
    "videommmu": {_Q3I: [R(65.5, _EVR, "easyvideor1")],
                  _Q3T: [R(72.8, "EvolvingLMMs-Lab/lmms-eval#932 (official report)"), R(66.3, _EVR, "easyvideor1")],
                  _Q25: [R(47.4, "recall")]},
    "videomathqa": {_Q3I: [R(46.4, _EVR + " (2100 items, micro)", "easyvideor1")],
                    _Q3T: [R(43.7, _EVR + " (2100 items, micro)", "easyvideor1")]},
    "charades_sta": {_Q3I: [R(56.0, "QwenLM/Qwen3-VL#1718 (blog, mIoU)")], _Q25: [R(43.6, "EvolvingLMMs-Lab/lmms-eval#857 (mIoU)")]},
}

MODELS = (_Q3I, _Q3T, _Q25)


def references(benchmark: str, model: str) -> list[Reference]:
    """The published numbers for `benchmark` and `model` (empty when there are none)."""
    return list(NUMBERS.get(benchmark, {}).get(model, []))


def guess_model(model_dir: str) -> str | None:
    """The reference row a model directory's name suggests ("Qwen3-VL-8B-Instruct" → qwen3-vl-8b-instruct)."""
    name = model_dir.rstrip("/").split("/")[-1].lower().replace("_", "-")
    return next((m for m in MODELS if m in name), None)
