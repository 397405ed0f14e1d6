"""VideoReasonBench: the "Final Answer:" summary compared by rules, the rest flagged for the judge."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("videoreasonbench")
ASK = "\n\nProvide a summary of the final answer after 'Final Answer:'"
OFFICIAL = [
    {"video": "card/state1_op5_start.mp4", "question": "What are the 1st to 2nd cards added?" + ASK,
     "answer": "1st: Queen of Clubs, pile0\n2nd: Ace of Hearts, pile0"},
    {"video": "cup/state2.mp4", "question": "Where are the coins at the end?", "answer": "a1, b3"},
]
EVR = [{"data_type": "video", "data_source": "VideoReasonBench", "problem_type": "open-ended", "path": r["video"],
        "problem": r["question"], "problem_id": i + 1, "options": [], "solution": f"<answer>{r['answer']}</answer>"}
       for i, r in enumerate(OFFICIAL)]
KEYS = ("id", "gt", "video", "problem", "problem_type")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "official.json").write_text(json.dumps(OFFICIAL))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    evr, official = BENCH.load(files / "evr.json"), BENCH.load(files / "official.json", fmt="official")
    assert project(evr, KEYS) == project(official, KEYS)


def test_oracle_constant_and_scenes(files, tmp_path):
    items = BENCH.load(files / "evr.json")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.parts == {"scene/card": 1.0, "scene/cup": 1.0, "undecided": 0.0, "undecided/judged": 0.0}
    rep = run_benchmark(BENCH, items, constant("Final Answer: a1, b3"), tmp_path)
    assert rep.value == 0.5 and rep.parts["scene/cup"] == 1.0
    assert all(BENCH.needs_judge(i) for i in items)


def test_prompt_asks_for_final_answer_once(files):
    card, cup = BENCH.load(files / "evr.json")
    assert BENCH.prompted(card, PromptContext()).text.count("Final Answer:") == 1
    assert BENCH.prompted(cup, PromptContext()).text.endswith(ASK)


@pytest.mark.parametrize("output, expected, pred", [
    ("Reasoning…\nFinal Answer: a1, b3", 1.0, "a1, b3"),
    ("Final Answer: A1,  B3.", 1.0, "A1,  B3"),
    ("**Final Answer:** a1, b3", 1.0, "a1, b3"),
    ("a1, b3", 1.0, "a1, b3"),                                 # no marker: the whole answer
    ("Final answer: b3 and a1", 0.0, "b3 and a1"),             # equivalent? the judge decides
])
def test_rules(output, expected, pred):
    res = BENCH.score_item(output, BENCH.item(EVR[1]))
    assert res["score"] == expected and res["pred"] == pred and bool(res.get("needs_judge")) is (expected == 0.0)


def test_multiline_ground_truth():
    assert score("videoreasonbench", "Final Answer:\n1st: Queen of Clubs, pile0\n2nd: Ace of Hearts, pile0", EVR[0]) == 1.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1440
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and set(rep.counts) == {"items"} | {f"scene/{s}" for s in
                                                               ("card", "chip", "cup", "file_sys", "grid", "hrd")}
    assert BENCH.report([(i, BENCH.score_item("I don't know", i)) for i in items]).value == 0.0
