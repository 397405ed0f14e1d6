"""Video-MME: loaders for the shared schema and the official release, subtitles, official scoring."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("videomme")

OFFICIAL_ROWS = [
    {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "History", "url": "u",
     "videoID": "vidA", "question_id": "001-1", "task_type": "Counting Problem", "question": "How many apples?",
     "options": ["A. One.", "B. Two.", "C. Three.", "D. Four."], "answer": "C"},
    {"video_id": "002", "duration": "long", "domain": "Sports", "sub_category": "Football", "url": "u",
     "videoID": "vidB", "question_id": "002-1", "task_type": "Action Reasoning", "question": "Who scores?",
     "options": ["A. Red.", "B. Blue.", "C. Nobody.", "D. Both."], "answer": "A"},
]
EVR_RECORDS = [{"problem_id": r["question_id"], "problem": r["question"], "problem_type": "multiple choice",
                "options": repr(r["options"]), "solution": f"<answer>{r['answer']}</answer>",
                "path": f"./videos/{r['videoID']}.mp4", "duration": r["duration"], "domain": r["domain"],
                "task_type": r["task_type"], "videoID": r["videoID"], "data_type": "video"} for r in OFFICIAL_ROWS]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR_RECORDS))
    pq.write_table(pa.Table.from_pylist(OFFICIAL_ROWS), tmp_path / "test-00000.parquet")
    return tmp_path


def test_both_formats_load_to_the_same_items(fixtures):
    evr = BENCH.load(fixtures / "evr.json")
    official = BENCH.load(fixtures / "test-00000.parquet")
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)
    assert evr[0]["video"] == "videos/vidA.mp4" and evr[0]["gt"] == "C"


def test_oracle_scores_100_and_a_constant_scores_its_share(fixtures, tmp_path):
    items = BENCH.load(fixtures / "test-00000.parquet")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path)
    assert rep.value == 0.5 and rep.parts["duration/long"] == 1.0 and rep.parts["duration/short"] == 0.0


def test_official_rules(fixtures):
    item = BENCH.load(fixtures / "evr.json")[0]  # GT C, options Apples/Two/Three/Four
    assert score("videomme", "C", item) == 1.0
    assert score("videomme", "<think>maybe A</think>The answer is (C).", item) == 1.0
    assert score("videomme", "Three.", item) == 1.0          # option text, V1 stage 2
    assert score("videomme", "the answer is a cat", item) == 0.0  # no article-as-letter
    assert score("videomme", "", item) == 0.0


def test_subtitles_are_read_and_placed_first(fixtures):
    root = fixtures / "Video-MME"
    (root / "subtitle").mkdir(parents=True)
    (root / "subtitle" / "vidA.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nHello there\n\n"
                                                 "2\n00:00:03,000 --> 00:00:04,000\nThree apples\n")
    item = BENCH.load(fixtures / "evr.json")[0]
    subs = BENCH.subtitles(item, root)
    assert subs == "Hello there\nThree apples"
    text = BENCH.prompted(item, PromptContext(subtitles=subs)).text
    assert text.startswith("This video's subtitles are listed below:\nHello there\nThree apples\n")
    assert BENCH.subtitles(BENCH.load(fixtures / "evr.json")[1], root) is None


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 2700
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    share_a = sum(i["gt"] == "A" for i in items) / len(items)
    assert run_benchmark(BENCH, items, constant("A"), tmp_path).value == pytest.approx(share_a)
