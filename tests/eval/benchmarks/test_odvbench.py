"""ODV-Bench (no shared file): assumed release rows and EasyVideoR1's schema, strict extractor,
breakdowns by task and subtask."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.benchmarks.odvbench import clip_name

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("odvbench")

OFFICIAL = [
    {"id": "q0", "video": "drive/src_a.mp4", "start": 10, "end": 25, "question": "What does the car do next?",
     "options": ["Turn left", "Stop", "Overtake", "Reverse"], "answer": "B", "task": "prediction", "subtask": "ego"},
    {"id": "q1", "video": "drive/src_b.mp4", "start": 0, "end": 8, "question": "Is the light red?",
     "options": {"A": "Yes", "B": "No"}, "answer": "A", "task": "perception", "subtask": "signal"},
]
EVR = [
    {"problem_id": "q0", "problem": "What does the car do next?", "problem_type": "multiple choice",
     "options": ["A. Turn left", "B. Stop", "C. Overtake", "D. Reverse"], "solution": "<answer>B</answer>",
     "path": "0_src_a_s10_e25.mp4", "odv_task": "prediction", "odv_subtask": "ego", "data_type": "video"},
    {"problem_id": "q1", "problem": "Is the light red?", "problem_type": "multiple choice",
     "options": ["A. Yes", "B. No"], "solution": "<answer>A</answer>",
     "path": "1_src_b_s0_e8.mp4", "odv_task": "perception", "odv_subtask": "signal", "data_type": "video"},
]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "release.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "odvbench.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(annotations_dir=fixtures), BENCH.load(fixtures / "release.json")
    keys = ("id", "options", "letters", "gt", "video", "problem", "odv_task", "odv_subtask")
    assert project(evr, keys) == project(official, keys)
    assert clip_name(3, "a/b/src.mp4", 1.5, 9) == "3_src_s1.5_e9.mp4"


def test_oracle_constant_and_breakdowns(fixtures, tmp_path):
    items = BENCH.load(fixtures / "release.json")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path)
    assert rep.value == 0.5 and rep.parts["odv_task/perception"] == 1.0 and rep.parts["odv_subtask/ego"] == 0.0


@pytest.mark.parametrize("text, want", [("B", 1.0), ("<answer>B</answer>", 1.0), ("Final answer: B", 1.0),
                                        ("Stop", 0.0), ("C", 0.0), ("", 0.0)])
def test_rules(text, want):
    assert score("odvbench", text, EVR[0]) == want


def test_no_shared_file_is_declared():
    assert BENCH.expected_items is None
