"""VCR-Bench: multiple choice by V1 on the final answer, open-ended by exact match then the judge."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("vcrbench")
OFFICIAL = [
    {"id": 0, "video_path": "video/videoEspresso/kill_bill.mp4", "question": "In which room does the second fight take place?",
     "multiple-choice": False, "answer": "Kitchen", "dimension": "Spatial"},
    {"id": 3, "video_path": "video/MMVU/chem.mp4", "question": "Why did the colour change?", "multiple-choice": True,
     "choices": {"A": "Heat", "B": "A catalyst", "C": "Oxidation", "D": "Light"}, "answer": "C", "dimension": "Causal"},
]
EVR = [{"data_type": "video", "data_source": "VCR-Bench", "problem_id": r["id"], "path": r["video_path"],
        "problem": r["question"], "problem_type": "multiple choice" if r["multiple-choice"] else "open-ended",
        "options": [f"{k}. {v}" for k, v in r.get("choices", {}).items()], "solution": f"<answer>{r['answer']}</answer>",
        "dimension": r["dimension"]} for r in OFFICIAL]
KEYS = ("id", "options", "letters", "gt", "video", "problem", "problem_type", "dimension")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "official.json").write_text(json.dumps(OFFICIAL))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    evr, official = BENCH.load(files / "evr.json"), BENCH.load(files / "official.json")
    assert project(evr, KEYS) == project(official, KEYS)


def test_oracle_constant_and_judge_flags(files, tmp_path):
    items = BENCH.load(files / "official.json")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.parts["source/MMVU"] == 1.0 and rep.parts["dimension/Spatial"] == 1.0
    rep = run_benchmark(BENCH, items, constant("C"), tmp_path)
    assert rep.value == 0.5 and rep.parts["problem_type/open-ended"] == 0.0
    assert [BENCH.needs_judge(i) for i in items] == [True, False]


def test_prompt(files):
    mc = BENCH.load(files / "evr.json")[1]
    assert BENCH.prompted(mc, PromptContext()).text == (
        "Question: Why did the colour change?\nA. Heat\nB. A catalyst\nC. Oxidation\nD. Light\nAnswer: ")


@pytest.mark.parametrize("output, expected", [
    ("C", 1.0),
    ("Oxidation", 1.0),
    ("The iron rusts. Therefore, the final answer is: C", 1.0),
    ("A", 0.0),
    ("B or C", 0.0),
])
def test_multiple_choice(output, expected):
    assert score("vcrbench", output, EVR[1]) == expected


@pytest.mark.parametrize("output, expected, judged", [
    ("Kitchen", 1.0, False),
    ("kitchen.", 1.0, False),
    ("Final Answer: Kitchen", 1.0, False),
    ("In the kitchen", 0.0, True),
])
def test_open_ended(output, expected, judged):
    res = BENCH.score_item(output, BENCH.item(EVR[0]))
    assert res["score"] == expected and bool(res.get("needs_judge")) is judged


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1034
    assert sum(BENCH.needs_judge(i) for i in items) == 524
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    share_c = sum(i["gt"] == "C" for i in items if i["problem_type"] == "multiple choice") / len(items)
    assert BENCH.report([(i, BENCH.score_item("C", i)) for i in items]).value == pytest.approx(share_c)
