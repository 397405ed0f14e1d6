"""Video-Holmes: release JSON and shared schema, the official extract_option (tags required)."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.extractors.holmes import extract_option

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("holmes")
SIX = list("ABCDEF")

OFFICIAL = [
    {"video ID": "fH6b", "Question ID": "fH6b_1", "Question Type": "SR", "Question": "What is the relationship?",
     "Options": {"A": "neighbor", "B": "colleague", "C": "brother", "D": "doctor", "E": "stranger", "F": "friend"},
     "Answer": "F", "Explanation": "…"},
    {"video ID": "fH6b", "Question ID": "fH6b_2", "Question Type": "IMC", "Question": "Why charge the phone?",
     "Options": {"A": "call", "B": "bath", "C": "games", "D": "heat", "E": "test", "F": "power"},
     "Answer": "A", "Explanation": "…"},
]
EVR = [{"problem_id": r["Question ID"], "problem": r["Question"], "problem_type": "multiple choice",
        "data_type": "video", "data_source": "Video-Holmes", "options": [f"{k}. {v}" for k, v in r["Options"].items()],
        "solution": f"<answer>{r['Answer']}</answer>", "path": "./videos_cropped/fH6b.mp4"} for r in OFFICIAL]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "test_Video-Holmes.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "test_Video-Holmes.json")
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)


def test_oracle_and_constant_with_types(fixtures, tmp_path):
    items = BENCH.load(fixtures / "test_Video-Holmes.json")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    tagged, bare = constant("<answer>F</answer>"), constant("F")  # both alive: stores are named by id(answer)
    rep = run_benchmark(BENCH, items, tagged, tmp_path)
    assert rep.value == 0.5 and rep.parts["question_type/SR"] == 1.0 and rep.parts["question_type/IMC"] == 0.0
    assert run_benchmark(BENCH, items, bare, tmp_path).value == 0.0  # untagged answers are wrong


@pytest.mark.parametrize("text, want", [
    ("The answer is F", ""),                                  # [exec] no tags → wrong (EVR's rules read F)
    ("<answer>F</answer>", "F"),
    ("<answer>B</answer> then <answer>C</answer>", "C"),      # the last block
    ("<answer>C: brother</answer>", "C"),
    ("<answer>[D]</answer>", "D"),
    ("<answer>E stranger</answer>", "E"),
    ("<answer>none</answer>", ""),
])
def test_extract_option(text, want):
    assert extract_option(text, SIX) == want


def test_reasoning_removed_before_reading():
    assert score("holmes", "<think>maybe <answer>A</answer></think><answer>F</answer>", EVR[0]) == 1.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1837
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    assert run_benchmark(BENCH, items, constant("<answer>F</answer>"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "F" for i in items) / len(items))
