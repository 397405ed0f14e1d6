"""MotionBench: meta JSONL release and shared schema, lmms-eval's extractor without upper-casing."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.extractors.motionbench import extract

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("motionbench")

META = [
    {"key": "37e1", "video_path": "self-collected/37e1.mp4", "video_type": "x", "qa": [
        {"uid": "1", "question": "Describe the action order.\nA. Jump, Stand\nB. Stand, Jump\nC. Lay, Jump",
         "answer": "C", "question_type": "Action Order"}]},
    {"key": "ef47", "video_path": "public-dataset/ef47.mp4", "video_type": "y", "qa": [
        {"uid": "2", "question": "What is held?\nA. Screw\nB. Pen\nC. Screwdriver\nD. Wrench", "answer": "C",
         "question_type": "Motion-related Objects"},
        {"uid": "3", "question": "Unreleased?\nA. x\nB. y", "answer": "NA", "question_type": "Camera Motion"}]},
]
EVR = [{"problem_id": "1", "problem": "Describe the action order.", "problem_type": "multiple choice",
        "data_type": "video", "original_question_type": "Action Order",
        "options": ["A. Jump, Stand", "B. Stand, Jump", "C. Lay, Jump"], "solution": "<answer>C</answer>",
        "path": "./self-collected/37e1.mp4", "data_source": "MotionBench"},
       {"problem_id": "2", "problem": "What is held?", "problem_type": "multiple choice", "data_type": "video",
        "original_question_type": "Motion-related Objects", "options": ["A. Screw", "B. Pen", "C. Screwdriver", "D. Wrench"],
        "solution": "<answer>C</answer>", "path": "./public-dataset/ef47.mp4", "data_source": "MotionBench"}]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "video_info.meta.jsonl").write_text("\n".join(json.dumps(m) for m in META))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats_and_unreleased_answers_left_out(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "video_info.meta.jsonl")
    keys = ("id", "options", "letters", "gt", "video", "problem", "original_question_type")
    assert project(evr, keys) == project(official, keys)


def test_oracle_constant_and_answered_rate(fixtures, tmp_path):
    items = BENCH.load(fixtures / "evr.json")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    say_c, half = constant("C"), (lambda i: "D" if i["id"] == "2" else "no idea")  # both alive (stores by id)
    rep = run_benchmark(BENCH, items, say_c, tmp_path)
    assert rep.value == 1.0 and rep.parts["source/public-dataset"] == 1.0
    rep = run_benchmark(BENCH, items, half, tmp_path)
    assert rep.value == 0.0 and rep.parts["answered_rate"] == 0.5


@pytest.mark.parametrize("text, want", [
    ("The answer is a cat", ""),      # [exec] lmms-eval upper-cases and reads A: fixed
    ("C", "C"), ("c", "C"), ("ANSWER: B", "B"), ("The best answer is D.", "D"), ("(B) Pen", "B"),
    ("B) Pen", "B"), ("", ""),
])
def test_extract(text, want):
    assert extract(text, list("ABCD")) == want


def test_letters_are_the_items_own():
    assert score("motionbench", "D", EVR[0]) == 0.0 and extract("D", list("ABC")) == ""


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 4018
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.parts["answered_rate"] == 1.0
    assert rep.counts["source/self-collected"] == 2703 and rep.counts["source/public-dataset"] == 1315
    assert run_benchmark(BENCH, items, constant("B"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "B" for i in items) / len(items))
