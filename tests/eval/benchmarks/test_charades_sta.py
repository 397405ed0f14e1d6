"""Charades-STA: the <think>-wrapped ground truth, lmms-eval's extract_time, EasyVideoR1's JSON, mIoU and R@m."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, run_benchmark

BENCH = get_benchmark("charades_sta")
PLACEHOLDER = "<[PLHD21_never_used_51bce0c785ca2f68081bfa7d91973934]>"
ROWS = [("3MSZA.mp4", "person turn a light on.", [24.3, 30.4]), ("3MSZA.mp4", "person open the door.", [0.0, 6.0]),
        ("AB12C.mp4", "a person is sitting on a chair.", [10.0, 20.0])]
EVR = [{"data_type": "video", "data_source": "charades_sta", "problem_type": "temporal grounding", "path": v,
        "problem": c, "problem_id": i, "options": [],
        "solution": f"<think>{json.dumps({'time': t, 'boxes': {}})}</think>{PLACEHOLDER}"} for i, (v, c, t) in enumerate(ROWS)]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "test.json").write_text(json.dumps([{"video": v, "caption": c, "timestamp": t} for v, c, t in ROWS]))
    (tmp_path / "charades_sta_test.txt").write_text(
        "".join(f"{v[:-4]} {t[0]} {t[1]}##{c}\n" for v, c, t in ROWS))
    return tmp_path


def test_all_formats_load_to_the_same_items(files):
    from evr1.eval.benchmarks.charades_sta import gt_span

    loaded = [BENCH.load(files / n) for n in ("evr.json", "test.json", "charades_sta_test.txt")]
    views = [[(i["id"], i["video"], i["problem"], gt_span(i)) for i in items] for items in loaded]
    assert views[0] == views[1] == views[2]
    assert views[0][0] == ("0", "3MSZA.mp4", "person turn a light on.", (24.3, 30.4))


def test_oracle_constant_and_recall(files, tmp_path):
    items = BENCH.load(files / "evr.json")
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.metric == "miou" and rep.value == 1.0 and rep.parts == {"R@0.3": 1.0, "R@0.5": 1.0, "R@0.7": 1.0, "undecided": 0.0, "undecided/judged": 0.0}
    rep = run_benchmark(BENCH, items, constant("The event happens in the 0 - 12 seconds."), tmp_path)
    # IoUs: 0 (disjoint), 6/12 = 0.5, 2/20 = 0.1
    assert rep.value == pytest.approx(0.2)
    assert rep.parts == pytest.approx({"R@0.3": 1 / 3, "R@0.5": 1 / 3, "R@0.7": 0.0, "undecided": 0.0, "undecided/judged": 0.0})
    json_oracle = lambda i: "<answer>" + json.dumps({"time": list(json.loads(i["gt"])["time"])}) + "</answer>"
    assert run_benchmark(BENCH, items, json_oracle, tmp_path / "json").value == 1.0


def test_prompt(files):
    item = BENCH.load(files / "evr.json")[0]
    text = BENCH.prompted(item, PromptContext()).text
    assert text.startswith("Please find the visual event described by a sentence in the video")
    assert text.endswith("Now I will give you the textual sentence: person turn a light on. "
                         "Please return its start time and end time.")


@pytest.mark.parametrize("output, expected", [
    ("The event happens in the 24.3 - 30.4 seconds.", (24.3, 30.4)),
    ("The event happens from 24.3 to 30.4 seconds.", (24.3, 30.4)),        # "to" → "-"
    ("The event happens in the 30.4 - 24.3 seconds.", (24.3, 30.4)),       # reversed: swapped
    ("It happens at 00:24 - 00:30.", (24.0, 30.0)),                         # mm:ss range
    ("The event starts at 00:00:18\nand ends at 00:00:23.", (18.0, 23.0)),   # hh:mm:ss, the first per sentence, paired
    ("The event starts at 00:00:18 and ends at 00:00:23.", (18.0, 23.0)),    # every clock time of a sentence, paired
    ("Start time: 0.8 seconds\nEnd time: 1.1 seconds", (0.8, 1.1)),         # first number per candidate sentence
    ("24.3s-30.4s", (24.3, 30.4)),
    ("1.5 - 3 and later 7 - 9", (1.5, 3.0)),                                # the first pair wins
    ("I cannot tell.", None),
    ("It starts at 5.", None),                                              # one number: no pair
])
def test_extract_time(output, expected):
    from evr1.eval.extractors.grounding import extract_time

    found = extract_time(output)
    assert (found[0] if found else None) == (pytest.approx(expected) if expected else None)


@pytest.mark.parametrize("output, expected", [
    ('<answer>{"time": [24.3, 30.4]}</answer>', 1.0),
    ('reasoning… {"time": [24.3, 30.4]}', 1.0),                             # bare JSON
    ('{"time": [0, 1]} then {"time": [24.3, 30.4]}', 1.0),                  # the last JSON object
    ('<answer>{"time": [30.4, 24.3]}</answer>', 1.0),                       # reversed JSON: swapped (deviation)
    ("The event happens in the 27.35 - 30.4 seconds.", 0.5),
    ("The event happens in the 40 - 50 seconds.", 0.0),
    ("no idea", 0.0),
])
def test_scores(output, expected):
    assert score("charades_sta", output, EVR[0]) == pytest.approx(expected)


def test_result_carries_iou():
    item = BENCH.item(EVR[0])
    res = BENCH.score_item("<think>hmm</think>The event happens in the 24.3 - 30.4 seconds.", item)
    assert res["iou"] == res["score"] == 1.0 and res["pred"] == [24.3, 30.4]


def test_iou_edge_cases():
    from evr1.eval.extractors.grounding import temporal_iou

    assert temporal_iou((5.0, 5.0), (5.0, 5.0)) == 0.0          # empty union: 0, not a division by zero
    assert temporal_iou((0.0, 10.0), (5.0, 15.0)) == pytest.approx(1 / 3)
    assert temporal_iou(None, (0.0, 1.0)) == 0.0


def test_bad_ground_truth_names_the_record():
    with pytest.raises(ValueError, match="charades_sta record '0': field 'solution'"):
        score("charades_sta", "1 - 2", {**EVR[0], "solution": "<answer>nothing</answer>"})


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 3720
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.parts["R@0.7"] == 1.0
    from evr1.eval.benchmarks.charades_sta import gt_span
    from evr1.eval.extractors.grounding import temporal_iou

    expected = sum(temporal_iou((0.0, 10.0), gt_span(i)) for i in items) / len(items)
    rep = BENCH.report([(i, BENCH.score_item("The event happens in the 0 - 10 seconds.", i)) for i in items])
    assert rep.value == pytest.approx(expected) and 0 < rep.value < 1
