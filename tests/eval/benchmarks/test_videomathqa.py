"""VideoMathQA: MCQ + multi-binary groups, MBin, the classic regex with its bugs fixed, subtitles."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("videomathqa")


def _question(qid, video, mcq_answer, binaries):
    rows = [{"question_id": qid, "videoID": video, "question": f"Question {qid}?", "category": "Counting",
             "length": "short", "options": ["A. 24", "B. 28", "C. 30", "D. 12", "E. 18"], "answer": mcq_answer}]
    for k, (opts, ans) in enumerate(binaries, 1):
        rows.append({"question_id": qid, "videoID": video, "question": f"Question {qid}?", "category": "Counting",
                     "length": "short", "options": opts, "answer": ans, "mbinary_id": k})
    return rows


OFFICIAL = (_question("vidA-1", "vidA", "B", [(["A. 12", "B. 28"], "B"), (["A. 28", "B. 30"], "A"),
                                              (["A. 18", "B. 28"], "B"), (["A. 28", "B. 24"], "A")])
            + _question("vidB-2", "vidB", "A", [(["A. 24", "B. 30"], "A"), (["A. 12", "B. 24"], "B"),
                                                (["A. 24", "B. 18"], "A"), (["A. 28", "B. 24"], "B")]))
EVR = [{"problem_id": r["question_id"], "problem": r["question"], "data_type": "video", "problem_type": "multiple choice",
        "options": r["options"], "solution": f"<answer>{r['answer']}</answer>", "path": f"./videos/{r['videoID']}.mp4",
        "video_id": r["videoID"], "data_source": "VideoMathQA", "category": r["category"], "length": r["length"],
        "steps": "{}", **({"mbinary_id": r["mbinary_id"]} if "mbinary_id" in r else {})} for r in OFFICIAL]
KEYS = ("id", "options", "letters", "gt", "video", "problem", "problem_id")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.jsonl").write_text("".join(json.dumps(r) + "\n" for r in EVR))
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "mbinary_id"} for r in OFFICIAL]),
                   tmp_path / "test.parquet")
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    evr, official = BENCH.load(files / "evr.jsonl"), BENCH.load(files / "test.parquet")
    assert project(evr, KEYS) == project(official, KEYS)
    assert [i["id"] for i in evr[:3]] == ["vidA-1", "vidA-1/1", "vidA-1/2"]      # unique by (problem_id, mbinary_id)


def test_oracle_constant_and_mbin(files, tmp_path):
    items = BENCH.load(files / "evr.jsonl")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.metric == "mbin" and rep.value == 1.0 and rep.parts["mcq"] == 1.0
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path)
    assert rep.value == 0.0                                      # no group has all four binaries right
    assert rep.parts["mcq"] == 0.5 and rep.parts["micro_accuracy"] == pytest.approx(5 / 10)
    assert rep.counts["mbin"] == 2 and rep.counts["mcq"] == 2
    wrong_one = {items[1]["id"]}                                  # one binary of group vidA wrong → vidA fails
    rep = run_benchmark(BENCH, items, lambda i: "C" if i["id"] in wrong_one else i["gt"], tmp_path / "one-wrong")
    assert rep.value == 0.5 and rep.parts["mcq"] == 1.0


def test_prompt_and_subtitles(files):
    items = BENCH.load(files / "evr.jsonl")
    text = BENCH.prompted(items[0], PromptContext()).text
    assert text.startswith("Select the best answer to the following multiple-choice question based on the video. "
                           "Respond with the letter (A, B, C, D or E) of the correct option.\nQuestion vidA-1?\nA. 24\n")
    assert text.endswith("E. 18\n\nAnswer with the option's letter (A, B, C, D or E) from the given choices directly.")
    assert "(A or B)" in BENCH.prompted(items[1], PromptContext()).text
    root = files / "VideoMathQA"
    (root / "subtitles").mkdir(parents=True)
    (root / "subtitles" / "vidA.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nCount the triangles\n")
    subs = BENCH.subtitles(items[0], root)
    assert subs == "Count the triangles" and BENCH.subtitles(items[5], root) is None
    text = BENCH.prompted(items[0], PromptContext(subtitles=subs)).text
    assert text.startswith("This video's subtitles are listed below:\nCount the triangles\n")
    assert "based on the video and the subtitles" in text


@pytest.mark.parametrize("output, expected", [
    ("B", "B"),
    ("The best answer is B.", "B"),
    ("Answer: C", "C"),                      # [exec] reference: A ("Answer" has no prefix entry) — fixed
    ("Best option:(D) 12", "D"),             # [exec] reference: B (glued prefixes) — fixed
    ("The correct option is E", "E"),
    ("I believe it is D", "D"),
    ("This is a very long answer that never names any of the option letters at all", ""),
    ("", ""),
])
def test_classic_regex(output, expected):
    from evr1.eval.extractors.lmms import classic

    assert classic(output, "ABCDE") == expected


def test_scoring_through_public_api():
    assert score("videomathqa", "Answer: B", EVR[0]) == 1.0
    assert score("videomathqa", "Answer: A", EVR[0]) == 0.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 2100 and len({i["id"] for i in items}) == 2100
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.counts["mbin"] == 420 and rep.counts["mcq"] == 420
    rep = BENCH.report([(i, BENCH.score_item("A", i)) for i in items])
    groups = {}
    for i in items:
        if i.get("mbinary_id") is not None:
            groups.setdefault(i["problem_id"], []).append(i["gt"] == "A")
    assert rep.value == pytest.approx(sum(all(g) for g in groups.values()) / 420)
    assert rep.parts["mcq"] == pytest.approx(sum(i["gt"] == "A" for i in items if i.get("mbinary_id") is None) / 420)
    assert rep.parts["micro_accuracy"] == pytest.approx(sum(i["gt"] == "A" for i in items) / 2100)
