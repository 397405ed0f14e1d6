"""STVG: 0.5·tIoU + 0.5·box mIoU over common seconds, tIoU alone without GT boxes, reported parts."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("stvg")
ROWS = [
    {"video": "10712559773.mp4", "question": "Who is watching the ball?", "time": [10.0, 12.0],
     "boxes": {"10": [0, 0, 10, 10], "11": [0, 0, 10, 10], "12": [10, 10, 20, 20]}},
    {"video": "2.mp4", "question": "Who holds the black camera?", "time": [0.0, 4.0], "boxes": {}},
]
EVR = [{"data_type": "video", "data_source": "stvg", "problem_type": "spatial-temporal grounding", "path": r["video"],
        "problem": r["question"], "problem_id": i, "options": [],
        "solution": f"<answer>{json.dumps({'time': r['time'], 'boxes': r['boxes']})}</answer>"} for i, r in enumerate(ROWS)]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "official.json").write_text(json.dumps(ROWS))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    keys = ("id", "video", "problem", "gt", "problem_type")
    evr, official = BENCH.load(files / "evr.json"), BENCH.load(files / "official.json", fmt="official")
    assert project(evr, keys) == project(official, keys)


def test_oracle_and_constant(files, tmp_path):
    items = BENCH.load(files / "evr.json")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.parts == {"tiou": 1.0, "box_miou": 1.0, "undecided": 0.0, "undecided/judged": 0.0} and rep.counts["box_miou"] == 1
    answer = '<answer>{"time": [10, 14], "boxes": {"10": [0, 0, 10, 10], "11": [0, 0, 20, 20], "13": [0, 0, 5, 5]}}</answer>'
    rep = run_benchmark(BENCH, items, constant(answer), tmp_path)
    # item 1: tIoU 2/4, boxes over common seconds 10, 11 → (1 + 0.25)/2 → 0.5·0.5 + 0.5·0.625; item 2: tIoU 0 alone
    assert rep.value == pytest.approx((0.25 + 0.3125) / 2)
    assert rep.parts == pytest.approx({"tiou": 0.25, "box_miou": 0.625, "undecided": 0.0, "undecided/judged": 0.0})


def test_prompt(files):
    text = BENCH.prompted(BENCH.load(files / "evr.json")[0], PromptContext()).text
    assert text.startswith("Answer the following question based on the video.\nQuestion: Who is watching the ball?\n")
    assert '{"time": [start, end], "boxes": {"second": [x1, y1, x2, y2], ...}}' in text


@pytest.mark.parametrize("output, total, tiou, miou", [
    ('{"time": [10, 12], "boxes": {"10": [0, 0, 10, 10], "11": [0, 0, 10, 10], "12": [10, 10, 20, 20]}}', 1.0, 1.0, 1.0),
    ('{"time": [10, 12], "boxes": {"10.0": [0, 0, 10, 10]}}', 1.0, 1.0, 1.0),           # "10.0" is second 10; extra GT seconds ignored
    ('{"time": [10, 12], "boxes": {"15": [0, 0, 10, 10]}}', 0.5, 1.0, 0.0),             # no common second: box term 0
    ('{"time": [10, 12]}', 0.5, 1.0, 0.0),
    ("The target appears from 10 to 12 seconds.", 0.5, 1.0, 0.0),                      # free-text span, no boxes
    ("nothing", 0.0, 0.0, 0.0),
])
def test_scores(output, total, tiou, miou):
    res = BENCH.score_item(output, BENCH.item(EVR[0]))
    assert (res["score"], res["tiou"], res["box_miou"]) == pytest.approx((total, tiou, miou))


def test_empty_ground_truth_boxes_score_tiou_alone():
    assert score("stvg", '{"time": [0, 2], "boxes": {"0": [0, 0, 1, 1]}}', EVR[1]) == pytest.approx(0.5)


def test_box_iou():
    from evr1.eval.extractors.grounding import box_iou

    assert box_iou([0, 0, 10, 10], [5, 5, 15, 15]) == pytest.approx(25 / 175)
    assert box_iou([0, 0, 10, 10], [0, 0]) == 0.0 and box_iou([5, 5, 0, 0], [5, 5, 0, 0]) == 0.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 2000
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.counts["box_miou"] == 1929          # 71 queries have no boxes
    from evr1.eval.benchmarks.stvg import ground_truth
    from evr1.eval.extractors.grounding import temporal_iou

    rep = BENCH.report([(i, BENCH.score_item('{"time": [0, 10]}', i)) for i in items])
    expected = [temporal_iou((0.0, 10.0), ground_truth(i)[0]) * (0.5 if ground_truth(i)[1] else 1.0) for i in items]
    assert rep.value == pytest.approx(sum(expected) / len(items)) and rep.parts["box_miou"] == 0.0
