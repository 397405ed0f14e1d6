"""LiveSports-3K QA: assumed release rows and shared schema ("A: text" options), strict extractor,
breakdowns by question type and OCR flag."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("livesports3k_qa")

OFFICIAL = [
    {"video_id": "I0rO", "begin": 300.745, "end": 350.676, "event_id": 10, "question_id": "I0rO_e10_q1",
     "question": "When are the parameters explained?", "option_A": "Close-up", "option_B": "Shooting",
     "option_C": "Assembling", "option_D": "At the end", "answer": "A", "q_type": "When", "ocr": 0},
    {"video_id": "I0rO", "begin": 355.247, "end": 423.545, "event_id": 11, "question_id": "I0rO_e11_q1",
     "question": "Who speaks first?", "options": ["A: The seated man", "B: The man standing", "C: Lying", "D: Nobody"],
     "answer": "B", "q_type": "Who", "ocr": 1},
]
EVR = [
    {"problem_id": "I0rO_e10_q1", "problem": "When are the parameters explained?", "problem_type": "multiple choice",
     "options": ["A: Close-up", "B: Shooting", "C: Assembling", "D: At the end"], "solution": "<answer>A</answer>",
     "path": "I0rO_300.745_350.676.mp4", "q_type_livesports": "When", "ocr_livesports": 0, "data_type": "video",
     "data_source": "LiveSports-3K-QA"},
    {"problem_id": "I0rO_e11_q1", "problem": "Who speaks first?", "problem_type": "multiple choice",
     "options": ["A: The seated man", "B: The man standing", "C: Lying", "D: Nobody"], "solution": "<answer>B</answer>",
     "path": "I0rO_355.247_423.545.mp4", "q_type_livesports": "Who", "ocr_livesports": 1, "data_type": "video",
     "data_source": "LiveSports-3K-QA"},
]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "qa.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "qa.json")
    keys = ("id", "options", "letters", "gt", "video", "problem", "q_type_livesports", "ocr_livesports")
    assert project(evr, keys) == project(official, keys)


def test_prompt_keeps_the_colon_style(fixtures):
    item = BENCH.load(fixtures / "evr.json")[0]
    assert "\nA: Close-up\nB: Shooting\n" in BENCH.prompted(item, PromptContext()).text


def test_oracle_constant_and_breakdowns(fixtures, tmp_path):
    items = BENCH.load(fixtures / "evr.json")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("B"), tmp_path)
    assert rep.value == 0.5 and rep.parts["q_type_livesports/Who"] == 1.0 and rep.parts["ocr_livesports/0"] == 0.0


@pytest.mark.parametrize("text, want", [("B", 1.0), ("B: The man standing", 1.0), ("The answer is B.", 1.0),
                                        ("<answer>B</answer>", 1.0), ("A", 0.0), ("The man standing", 0.0), ("", 0.0)])
def test_rules(text, want):
    assert score("livesports3k_qa", text, EVR[1]) == want


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1174 and len({i["id"] for i in items}) == 1174
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0
    assert rep.counts["q_type_livesports/What"] == 465 and rep.counts["ocr_livesports/1"] == 298
    assert run_benchmark(BENCH, items, constant("A"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "A" for i in items) / len(items))
