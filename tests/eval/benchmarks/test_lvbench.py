"""LVBench: meta JSONL release and shared schema, L1 extraction, accuracy."""

import json

import pytest

from evr1.eval import get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("lvbench")

META = [{"key": "Cm73", "type": "documentary", "qa": [
    {"uid": "1", "question": "What year appears?\n(A) 1636\n(B) 1366\n(C) 1363\n(D) 1633", "answer": "D",
     "question_type": ["key information retrieval"], "time_reference": "00:00-00:10"},
    {"uid": "2", "question": "How is the weather?\n(A) Cloudy\n(B) Snowy\n(C) Sunny\n(D) Rainy", "answer": "B",
     "question_type": ["entity recognition"], "time_reference": ""}]}]
EVR = [{"problem_id": "1", "problem": "What year appears?", "problem_type": "multiple choice", "data_type": "video",
        "options": ["A. 1636", "B. 1366", "C. 1363", "D. 1633"], "solution": "<answer>D</answer>",
        "path": "./videos/Cm73.mp4", "data_source": "LVBench"},
       {"problem_id": "2", "problem": "How is the weather?", "problem_type": "multiple choice", "data_type": "video",
        "options": ["A. Cloudy", "B. Snowy", "C. Sunny", "D. Rainy"], "solution": "<answer>B</answer>",
        "path": "./videos/Cm73.mp4", "data_source": "LVBench"}]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "video_info.meta.jsonl").write_text("\n".join(json.dumps(m) for m in META))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "video_info.meta.jsonl")
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)
    assert official[0]["question_type"] == "key information retrieval"


def test_oracle_and_constant(fixtures, tmp_path):
    items = BENCH.load(fixtures / "video_info.meta.jsonl")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("B"), tmp_path)
    assert rep.value == 0.5 and rep.parts["question_type/entity recognition"] == 1.0


@pytest.mark.parametrize("text, want", [("D", 1.0), ("(D) 1633", 1.0), ("The answer is D.", 1.0), ("D. 1633", 1.0),
                                        ("B", 0.0), ("", 0.0), ("I am not sure", 0.0)])
def test_rules(text, want):
    assert score("lvbench", text, EVR[0]) == want


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1492
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    assert run_benchmark(BENCH, items, constant("A"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "A" for i in items) / len(items))


def test_the_prompt_follows_the_model_family():
    from evr1.eval import PromptContext

    item = BENCH.item({"problem_id": 1, "problem": "What year?", "problem_type": "multiple choice",
                       "options": ["A. 1636", "B. 1366"], "solution": "<answer>A</answer>", "path": "v.mp4"})
    qwen3 = BENCH.prompted(item, PromptContext(family="qwen3")).text
    qwen25 = BENCH.prompted(item, PromptContext(family="qwen25")).text
    assert qwen3 == "What year?\n(A) 1636\n(B) 1366\nAnswer the question with the option letter."
    assert qwen25.startswith("Carefully watch the video") and "Question: What year?\nOptions:\n(A) 1636" in qwen25
    assert qwen25.endswith("Answer with the option's letter from the given choices directly.")
