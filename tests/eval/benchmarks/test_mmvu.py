"""MMVU: both splits, official and shared-schema loaders, V1 multiple choice, open-ended rules + judge flag."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

MC, ALL = get_benchmark("mmvu-mc"), get_benchmark("mmvu-all")

OFFICIAL = [
    {"id": 1, "question": "How many grams of precipitate?", "question_type": "multiple-choice",
     "choices": {"A": "10.0", "B": "5.0", "C": "12.0", "D": "15.0", "E": "20.0"}, "answer": "A",
     "video_path": "videos/Chemistry/0.mp4", "metadata": {"subject": "Chemistry"}},
    {"id": 2, "question": "Which organ is shown?", "question_type": "multiple-choice",
     "choices": {"A": "Heart", "B": "Liver", "C": "Lung", "D": "Kidney", "E": "Brain"}, "answer": "C",
     "video_path": "videos/Clinical_Medicine/3.mp4", "metadata": {"subject": "Clinical_Medicine"}},
    {"id": 3, "question": "Which cinematic shooting technique is shown in the video?", "question_type": "open-ended",
     "choices": {}, "answer": "Dolly Zoom", "video_path": "videos/Art/0.mp4", "metadata": {"subject": "Art"}},
]
EVR = [{"problem_id": r["id"], "problem": r["question"], "data_type": "video",
        "problem_type": "multiple choice" if r["choices"] else "open-ended",
        "original_question_type": r["question_type"],
        "options": [f"{k}. {v}" for k, v in r["choices"].items()], "process": "",
        "solution": f"<answer>{r['answer']}</answer>", "path": f"./{r['video_path']}", "data_source": "u"} for r in OFFICIAL]
KEYS = ("id", "options", "letters", "gt", "video", "problem", "problem_type")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "validation.json").write_text(json.dumps(OFFICIAL))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    for bench, n in ((ALL, 3), (MC, 2)):
        official = bench.load(files / "validation.json")
        evr = [i for i in bench.load(files / "evr.json") if bench is ALL or i["problem_type"] == "multiple choice"]
        assert len(official) == n
        assert project(official, KEYS) == project(evr, KEYS)
    assert get_benchmark("mmvu") is MC


def test_oracle_and_constant_with_discipline_breakdown(files, tmp_path):
    items = ALL.load(files / "validation.json")
    rep = run_benchmark(ALL, items, ALL.oracle, tmp_path)
    assert rep.value == 1.0 and rep.parts["discipline/Healthcare"] == 1.0 and rep.counts["discipline/Science"] == 1
    rep = run_benchmark(ALL, items, constant("A"), tmp_path)
    assert rep.value == pytest.approx(1 / 3)
    assert rep.parts["discipline/Science"] == 1.0 and rep.parts["subject/Clinical_Medicine"] == 0.0
    assert rep.parts["problem_type/open-ended"] == 0.0


def test_prompts(files):
    mc, open_ = ALL.load(files / "validation.json")[1:]
    text = ALL.prompted(mc, PromptContext()).text
    assert text.startswith("Question:Which organ is shown?\nA: Heart\nB: Liver\n")
    assert "Visual Information: processed video\nDo not generate any intermediate reasoning process." in text
    assert ALL.prompted(open_, PromptContext()).text.endswith("Directly output the final answer.")
    assert ALL.prompted(mc, PromptContext()).videos == ("videos/Clinical_Medicine/3.mp4",)


@pytest.mark.parametrize("output, expected", [
    ("C", 1.0),
    ("C.", 1.0),
    ("(C) Lung", 1.0),
    ("Lung", 1.0),                                           # option text (V1 stage 2)
    ("The heart pumps... Therefore, the final answer is: C", 1.0),
    ("<think>It is A? no.</think>C", 1.0),
    ("A or C", 0.0),                                         # two letters: not an answer (lmms-eval would give 1)
    ("the answer is a lung, C", 1.0),                        # the lower-case article is not the letter A
    ("A, so the answer is C", 0.0),                          # "A" and "C" both stand alone: unreadable
    ("B", 0.0),
    ("", 0.0),
])
def test_multiple_choice_rules(files, output, expected):
    item = EVR[1]  # GT C (Lung)
    assert score("mmvu-all", output, item) == expected


@pytest.mark.parametrize("output, expected, judged", [
    ("Dolly Zoom", 1.0, False),
    ("dolly zoom.", 1.0, False),
    ("Therefore, the final answer is: Dolly  Zoom", 1.0, False),
    ("**Final Answer:** \"Dolly Zoom\"", 1.0, False),
    ("It is a dolly zoom shot.", 0.0, True),                 # the judge decides
    ("", 0.0, True),
])
def test_open_ended_rules(output, expected, judged):
    bench = ALL
    item = bench.item(EVR[2])
    res = bench.score_item(output, item)
    assert res["score"] == expected and bool(res.get("needs_judge")) is judged
    if judged:
        assert res["pred"] == output.strip(" .")
    assert bench.needs_judge(item) and not bench.needs_judge(bench.item(EVR[0]))


def test_whole_shared_files(annotations, tmp_path):
    mc = MC.load(annotations_dir=annotations)
    assert len(mc) == MC.expected_items == 625
    assert run_benchmark(MC, mc, MC.oracle, tmp_path).value == 1.0
    assert MC.load(annotations / "mmvu.json") == mc
    everything = ALL.load(annotations_dir=annotations)
    assert len(everything) == ALL.expected_items == 1000
    assert sum(ALL.needs_judge(i) for i in everything) == 375
    rep = run_benchmark(ALL, everything, ALL.oracle, tmp_path)
    assert rep.value == 1.0 and rep.counts["discipline/Engineering"] == 348 and "discipline/unknown" not in rep.parts
    share_a = sum(i["gt"] == "A" for i in everything) / len(everything)
    assert ALL.report([(i, ALL.score_item("A", i)) for i in everything]).value == pytest.approx(share_a)
