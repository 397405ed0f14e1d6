"""Video-MME-v2 (no shared file): release rows and shared schema, classic regex over A–H, the
official grouped non-linear score, subtitles."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evr1.eval import PromptContext, get_benchmark, score
from evr1.eval.benchmarks.videomme_v2 import group_score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("videomme_v2")
OPTS = "\n".join(f"{l}. option {l}" for l in "ABCDEFGH")


def rows(vid, gtype, structure, answers):
    out = []
    for k, a in enumerate(answers, 1):
        last = k == len(answers)
        out.append({"video_id": vid, "question_id": f"{vid}-{k}", "question": f"Q{k} about {vid}?", "options": OPTS,
                    "answer": a, "group_type": gtype, "group_structure": structure,
                    "level": "L2" if last else None, "second_head": "perception" if last else None,
                    "third_head": "counting" if last else None})
    return out


OFFICIAL = rows("001", "relevance", "[1, 2, 3, 4]", "ABAH") + rows("002", "logic", "[1, 2, 3, 4]", "AABA")
EVR = [{**r, "problem_id": r["question_id"], "problem": r["question"], "problem_type": "multiple choice",
        "options": OPTS.split("\n"), "solution": f"<answer>{r['answer']}</answer>", "path": f"data/{r['video_id']}.mp4"}
       for r in OFFICIAL]


@pytest.fixture
def fixtures(tmp_path):
    pq.write_table(pa.Table.from_pylist(OFFICIAL), tmp_path / "test.parquet")
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures / "test.parquet")
    keys = ("id", "options", "letters", "gt", "video", "problem", "group_type")
    assert project(evr, keys) == project(official, keys)
    assert evr[0]["letters"] == list("ABCDEFGH")


def test_oracle_and_constant_group_scores(fixtures, tmp_path):
    items = BENCH.load(fixtures / "test.parquet")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.metric == "group_score" and rep.counts["groups"] == 2
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path)
    # relevance ABAH: 2 right → 4/16; logic AABA: chain of 2 → 4/16; naive 5/8
    assert rep.value == pytest.approx(0.25) and rep.parts["naive_accuracy"] == pytest.approx(5 / 8)
    assert rep.parts["group_type/logic"] == pytest.approx(0.25) and rep.parts["third_head/counting"] == pytest.approx(0.25)


@pytest.mark.parametrize("gtype, structure, right, want", [
    ("relevance", None, [1, 1, 1, 1], 1.0), ("relevance", None, [0, 1, 0, 1], 4 / 16),
    ("relevance", None, [1, 1, 1, 0], 9 / 16), ("relevance", None, [0, 0, 0, 0], 0.0),
    ("logic", "[1, 2, 3, 4]", [1, 1, 0, 1], 4 / 16), ("logic", "[1, 2, 3, 4]", [0, 1, 1, 1], 0.0),
    ("logic", "[1, 2, 3, 4]", [1, 1, 1, 0], 9 / 16),
    ("logic", "[1, [2, 3], 4]", [1, 0, 1, 0], 4 / 12), ("logic", "[1, [2, 3], 4]", [1, 1, 1, 0], 7 / 12),
    ("logic", "[1, [2, 3], 4]", [1, 0, 0, 1], 1 / 12),
    ("logic", "[[1, 2], 3, 4]", [0, 1, 1, 1], 1 / 10), ("logic", "[[1, 2], 3, 4]", [1, 1, 1, 0], 5 / 10),
    ("logic", "[[1, 2], 3, 4]", [1, 1, 1, 1], 1.0),
])
def test_group_score(gtype, structure, right, want):
    assert group_score(gtype, structure, [bool(r) for r in right]) == pytest.approx(want)


def test_unknown_group_type_is_an_error():
    with pytest.raises(ValueError, match="group_type"):
        group_score("other", None, [True])


@pytest.mark.parametrize("text, want", [("H", 1.0), ("Final Answer: H.", 1.0), ("Answer: H", 1.0),
                                        ("The best answer is (H) option H", 1.0), ("A", 0.0), ("", 0.0)])
def test_rules(text, want):
    assert score("videomme_v2", text, EVR[3]) == want  # GT H


def test_subtitles(fixtures):
    root = fixtures / "Video-MME-v2"
    (root / "subtitle").mkdir(parents=True)
    (root / "subtitle" / "001.jsonl").write_text('{"text": "Hello", "start_time": 0.1, "end_time": 0.4}\n'
                                                 '{"text": "world", "start_time": 0.5, "end_time": 0.9}\n')
    items = BENCH.load(fixtures / "evr.json")
    assert BENCH.subtitles(items[0], root) == "Hello world" and BENCH.subtitles(items[4], root) is None
    assert BENCH.prompted(items[0], PromptContext(subtitles="Hello world")).text.startswith(
        "This video's subtitles are listed below:\nHello world\n")
    assert "(A, B, C, D, E, F, G, or H)" in BENCH.prompted(items[0], PromptContext()).text
