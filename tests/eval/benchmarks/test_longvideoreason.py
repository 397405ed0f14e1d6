"""LongVideo-Reason: assumed release JSON and shared schema, the shared strict extractor."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.extractors.strict import strict_letter

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("longvideoreason")

OFFICIAL = [{"id": 1, "video": "I_Q3.mp4", "question": "Primary intention?", "options": ["Hunt", "Contrast", "Habitat", "Talk"],
             "answer": "B"},
            {"id": 2, "video": "8kaV.mp4", "question": "Her aim?", "options": ["A. Sell", "B. Vlog", "C. Ads", "D. Pack", "E. Other"],
             "answer": "E"}]
EVR = [{"problem_id": 1, "problem": "Primary intention?", "problem_type": "multiple choice", "data_type": "video",
        "options": ["A. Hunt", "B. Contrast", "C. Habitat", "D. Talk"], "solution": "<answer>B</answer>",
        "path": "./I_Q3.mp4", "data_source": "LongVideo-Reason"},
       {"problem_id": 2, "problem": "Her aim?", "problem_type": "multiple choice", "data_type": "video",
        "options": ["A. Sell", "B. Vlog", "C. Ads", "D. Pack", "E. Other"], "solution": "<answer>E</answer>",
        "path": "./8kaV.mp4", "data_source": "LongVideo-Reason"}]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "release.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "release.json")
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)


def test_oracle_and_constant(fixtures, tmp_path):
    items = BENCH.load(fixtures / "release.json")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    assert run_benchmark(BENCH, items, constant("<answer>E</answer>"), tmp_path).value == 0.5


@pytest.mark.parametrize("text, want", [
    ("<answer>B</answer>", "B"), ("<answer>(B) Contrast</answer>", "B"), ("<answer>B</answer> no, <answer>C</answer>", "C"),
    ("<answer>I think B or C</answer>", ""),          # a tag decides alone; unreadable inside → wrong
    ("Therefore, the final answer is: C", "C"), ("The correct answer is (D).", "D"), ("Final answer: **B**", "B"),
    ("B", "B"), ("(B)", "B"), ("B. Contrast", "B"), ("**C**", "C"),
    ("the answer is a contrast", ""),                  # lower-case article is no letter
    ("A contrast of species", ""),                     # a sentence starting with the article
    ("E", ""),                                         # not one of the item's options
    ("B and C", ""), ("", ""),
])
def test_strict_letter(text, want):
    assert strict_letter(text, list("ABCD")) == want


def test_score_api_with_reasoning():
    assert score("longvideoreason", "<think>A? no.</think><answer>B</answer>", EVR[0]) == 1.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 851
    assert max(len(i["letters"]) for i in items) == 8
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    assert run_benchmark(BENCH, items, constant("B"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "B" for i in items) / len(items))
