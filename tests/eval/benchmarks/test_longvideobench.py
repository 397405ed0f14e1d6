"""LongVideoBench: lvb_val.json release and shared schema, L2 (bugs fixed), subtitles."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score
from evr1.eval.extractors.lmms import classic

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("longvideobench")

OFFICIAL = [
    {"id": "q1", "video_id": "86Cx", "video_path": "86Cx.mp4", "subtitle_path": "86Cx_en.json",
     "question": "Which subtitle appears?", "candidates": ["one", "two", "three", "four", "five"], "correct_choice": 1,
     "duration_group": 600, "question_category": "TOS", "topic_category": "NP", "level": "L2"},
    {"id": "q2", "video_id": "99Ab", "video_path": "99Ab.mp4", "subtitle_path": "99Ab_en.json",
     "question": "What colour?", "candidates": ["red", "green", "blue"], "correct_choice": 0,
     "duration_group": 15, "question_category": "E3E", "topic_category": "NP", "level": "L1"},
]
EVR = [{"problem_id": r["id"], "problem": r["question"], "problem_type": "multiple choice", "data_type": "video",
        "options": [f"{'ABCDE'[k]}. {c}" for k, c in enumerate(r["candidates"])], "process": "",
        "solution": f"<answer>{'ABCDE'[r['correct_choice']]}</answer>", "path": f"./videos/{r['video_path']}",
        "original_question_type": "multiple-choice", "data_source": "LongVideoBench"} for r in OFFICIAL]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "lvb_val.json").write_text(json.dumps(OFFICIAL))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "lvb_val.json")
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)


def test_oracle_and_constant(fixtures, tmp_path):
    items = BENCH.load(fixtures / "lvb_val.json")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path)
    assert rep.value == 0.5 and rep.parts["duration_group/15"] == 1.0


@pytest.mark.parametrize("text, want", [
    ("Best option:(D) four", "D"),   # [exec] the source's concatenated prefixes give B: fixed
    ("Answer: C", "C"),              # [exec] the source lacks "Answer:" and gives A: fixed
    ("The best answer is E.", "E"),
    ("E", "E"),
    ("(B) two", "B"),
    ("I cannot tell from these frames what the subtitle said at that point in time", ""),
    ("", ""),
])
def test_l2(text, want):
    assert classic(text, list("ABCDE")) == want


def test_unreadable_is_wrong_not_random():
    assert score("longvideobench", "no idea", EVR[0]) == 0.0
    assert score("longvideobench", "B", EVR[0]) == 1.0


def test_subtitles(fixtures):
    root = fixtures / "LongVideoBench"
    (root / "subtitles").mkdir(parents=True)
    (root / "subtitles" / "86Cx_en.json").write_text(json.dumps(
        [{"start": "00:00:01.0", "end": "00:00:02.0", "line": "hello"}, {"start": "0", "end": "1", "line": "two"}]))
    items = BENCH.load(fixtures / "evr.json")
    assert BENCH.subtitles(items[0], root) == "hello\ntwo" and BENCH.subtitles(items[1], root) is None
    text = BENCH.prompted(items[0], PromptContext(subtitles="hello\ntwo")).text
    assert text.startswith("This video's subtitles are listed below:\nhello\ntwo\n")


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 1337
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    assert run_benchmark(BENCH, items, constant("A"), tmp_path).value == pytest.approx(
        sum(i["gt"] == "A" for i in items) / len(items))
