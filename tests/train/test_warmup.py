"""The format warm-up's targets (evr1/train/warmup.py) and the per-family accuracy breakdown."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from evr1.train import warmup
from evr1.train.breakdown import accuracy_by_family, family


def _row(**fields):
    """A `samples` row as the trainer holds it: unknown record fields live in the JSON `extra`."""
    extra = {k: fields.pop(k) for k in ("answer_space", "synth_kind") if k in fields}
    return {"sample_id": "s1", "answer": "B", "problem_type": "multiple choice", "options": [], **fields,
            "extra": json.dumps(extra)}


def test_answer_space_targets_are_uniform_and_reproducible():
    row = _row(answer_space=["A", "B", "C", "D"])
    drawn = [warmup.target(row, "answer_space", seed=0, step=step, draw=d) for step in range(1, 201) for d in range(4)]
    counts = Counter(drawn)
    assert set(counts) == {f"<answer>{a}</answer>" for a in "ABCD"}
    assert all(150 <= n <= 250 for n in counts.values()), counts  # 800 draws, 200 expected each
    assert drawn == [warmup.target(row, "answer_space", seed=0, step=s, draw=d) for s in range(1, 201) for d in range(4)]
    assert warmup.target(row, "ground_truth", seed=0, step=1) == "<answer>B</answer>"


def test_answer_space_falls_back_to_options_and_yes_no():
    assert warmup.answer_space(_row(options=["A. red", "B. green", "C. blue"])) == ["A", "B", "C"]
    assert warmup.answer_space(_row(problem_type="boolean")) == ["Yes", "No"]


def test_missing_answer_space_names_the_sample_and_field():
    with pytest.raises(ValueError, match=r"sample 's1'.*'answer_space'.*numerical"):
        warmup.answer_space(_row(problem_type="numerical"))


def test_accuracy_by_family_groups_by_synth_kind_else_problem_type():
    rows = [_row(synth_kind="colour"), _row(synth_kind="colour"), _row(problem_type="temporal grounding")]
    scores = [{"accuracy": 1.0}, {"accuracy": 0.0}, {"accuracy": 0.5}]
    assert family(rows[2]) == "temporal_grounding"
    assert accuracy_by_family(rows, scores, "val/accuracy") == {"val/accuracy/colour": 0.5,
                                                                  "val/accuracy/temporal_grounding": 0.5}
