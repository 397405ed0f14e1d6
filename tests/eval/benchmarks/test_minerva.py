"""MINERVA: release JSON and shared schema, lmms-eval's extractor without the random fallback."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.extractors.minerva import extract

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("minerva")
FIVE = list("ABCDE")

OFFICIAL = [{"key": "k0", "video_id": "--C26", "question": "How many three-pointers?", "answer_choice_0": "3.",
             "answer_choice_1": "1.", "answer_choice_2": "5.", "answer_choice_3": "2.", "answer_choice_4": "0.",
             "answer_id": 0, "answer": "3.", "question_type": "Counting"},
            {"key": "k1", "video_id": "--C26", "question": "Who dunks?", "answer_choice_0": "#4",
             "answer_choice_1": "#10", "answer_choice_2": "#0", "answer_choice_3": "#7", "answer_choice_4": "#3",
             "answer_id": 4, "answer": "#3", "question_type": "Event"}]
EVR = [{"problem_id": r["key"], "problem": r["question"], "problem_type": "multiple choice", "data_type": "video",
        "data_source": "Minderva", "options": [f"{'ABCDE'[k]}. {r[f'answer_choice_{k}']}" for k in range(5)],
        "solution": f"<answer>{'ABCDE'[r['answer_id']]}</answer>", "path": "--C26.mp4"} for r in OFFICIAL]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "minerva.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "minerva.json", fmt="official")
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)


def test_oracle_and_constant(fixtures, tmp_path):
    items = BENCH.load(fixtures / "minerva.json", fmt="official")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("E"), tmp_path)
    assert rep.value == 0.5 and rep.parts["question_type/Event"] == 1.0


@pytest.mark.parametrize("text, want", [
    ("The answer is B", "B"), ("Answer: (C)", "C"), ("A seems right, but the answer is D.", "D"),
    ("The option is E", "E"), ("I pick B over C", "C"),   # no declaration: the last capital choice letter
    ("Because Erin dunks", "E"),                            # the documented caution: capitals in echoed text count
    ("no idea", ""),                                        # no random letter
    ("The answer is b", "B"), ("answer: because", "B"),    # the source's pattern ignores letter case
])
def test_extract(text, want):
    assert extract(text) == want


def test_score_api():
    assert score("minerva", "The answer is A", EVR[0]) == 1.0 and score("minerva", "", EVR[0]) == 0.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1431
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    assert run_benchmark(BENCH, items, constant("E"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "E" for i in items) / len(items))
