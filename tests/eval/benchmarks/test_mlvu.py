"""MLVU test/dev: release JSON and shared schema, L1 over the item's own letters, M-Avg by task type."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.benchmarks.mlvu import BLOCKS, PREFIXES, task_type, video_prefix
from evr1.eval.extractors.lmms import mcq_extract

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

TEST = get_benchmark("mlvu-test")
DEV = get_benchmark("mlvu-dev")
SIX = list("ABCDEF")

OFFICIAL = [
    {"video": "test_surveil_27.mp4", "duration": 100, "question": "Anything unusual?", "question_type": "anomaly_reco",
     "candidates": ["Fighting", "Shoplifting", "Arrest", "Normal", "Shooting", "Vandalism"], "answer": "Shoplifting"},
    {"video": "test_sports_10.mp4", "duration": 90, "question": "Why a yellow card?", "question_type": "sportsQA",
     "candidates": ["Foul", "Dive", "Handball", "Time", "Offside", "Dissent"], "answer": "Dissent"},
    {"video": "test_sports_11.mp4", "duration": 90, "question": "Who scores?", "question_type": "sportsQA",
     "candidates": ["Red", "Blue", "Nobody", "Both", "Keeper", "Coach"], "answer": "Red"},
]
EVR = [{"problem_id": n + 1, "problem": r["question"], "problem_type": "multiple choice", "data_type": "video",
        "data_source": "MLVU", "options": [f"{'ABCDEF'[k]}. {c}" for k, c in enumerate(r["candidates"])],
        "solution": f"<answer>{'ABCDEF'[r['candidates'].index(r['answer'])]}</answer>", "path": f"./video/{r['video']}"}
       for n, r in enumerate(OFFICIAL)]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "test_mcq.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_alias_and_both_formats(fixtures):
    assert get_benchmark("mlvu") is TEST
    evr, official = TEST.load(fixtures / "evr.json"), TEST.load(fixtures / "test_mcq.json", fmt="official")
    keys = ("options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)
    of = task_type("mlvu-test")
    assert [of(i) for i in evr] == [of(i) for i in official] == ["anomaly_reco", "sportsQA", "sportsQA"]


def test_oracle_and_constant_m_avg(fixtures, tmp_path):
    items = TEST.load(fixtures / "evr.json")
    assert run_benchmark(TEST, items, TEST.oracle, tmp_path).value == 1.0
    rep = run_benchmark(TEST, items, constant("B"), tmp_path)
    # anomaly_reco 1/1, sportsQA 0/2 → M-Avg 0.5; micro 1/3
    assert rep.metric == "m-avg" and rep.value == pytest.approx(0.5)
    assert rep.parts["micro_accuracy"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("text, letters, want", [
    ("E", SIX, "E"),                       # [exec] lmms-eval with A–D gives "": fixed
    ("(F) Vandalism", SIX, "F"),           # [exec] likewise
    ("E", list("ABCD"), ""),               # the source's behaviour when letters are A–D
    ("B", SIX, "B"),
    ("The answer is C.", SIX, "C"),
    ("I choose D because it fits", SIX, "D"),
    ("(A) Fighting", SIX, "A"),
    ("The answer is a cat", SIX, ""),      # lower-case article is not a letter
    ("Answer: E", SIX, "E"),
    ("", SIX, ""),
])
def test_l1(text, letters, want):
    assert mcq_extract(text, letters) == want


def test_score_api_reads_six_letters():
    rec = EVR[1]  # GT F
    assert score("mlvu-test", "F", rec) == 1.0 and score("mlvu", "(F) Dissent", rec) == 1.0
    assert score("mlvu-test", "E", rec) == 0.0


@pytest.mark.parametrize("bench, n, types", [(TEST, 502, 9), (DEV, 2174, 7)])
def test_whole_shared_files(annotations, tmp_path, bench, n, types):
    items = bench.load(annotations_dir=annotations)
    assert len(items) == bench.expected_items == n
    of = task_type(bench.name)
    assert {of(i) for i in items} == {t for _, _, t in BLOCKS[bench.name]} and len(BLOCKS[bench.name]) == types
    for i in items:  # where the video name names a type, the problem_id block agrees
        hit = PREFIXES[bench.name].get(video_prefix(i["video"]))
        block = next(t for lo, hi, t in BLOCKS[bench.name] if lo <= int(i["problem_id"]) <= hi)
        assert hit in (None, block), i["id"]
    assert run_benchmark(bench, items, bench.oracle, tmp_path).value == 1.0
    rep = run_benchmark(bench, items, constant("A"), tmp_path)
    assert rep.parts["micro_accuracy"] == pytest.approx(sum(i["gt"] == "A" for i in items) / n)
