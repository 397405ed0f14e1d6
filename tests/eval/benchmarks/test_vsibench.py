"""VSI-Bench: first-token MC rule, MRA with ≤ and 10 thresholds, the 8-task overall."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("vsibench")

OFFICIAL = [
    {"id": 0, "dataset": "arkitscenes", "scene_name": "41069025", "question_type": "object_counting",
     "question": "How many table(s) are in this room?", "options": None, "ground_truth": "4"},
    {"id": 1, "dataset": "scannet", "scene_name": "scene0001", "question_type": "room_size_estimation",
     "question": "What is the size of this room?", "options": None, "ground_truth": "26.4"},
    {"id": 2, "dataset": "scannet", "scene_name": "scene0001", "question_type": "object_rel_direction_easy",
     "question": "Is the tv to the left or the right?", "options": ["A. left", "B. right"], "ground_truth": "A"},
    {"id": 3, "dataset": "scannet", "scene_name": "scene0001", "question_type": "object_rel_direction_hard",
     "question": "Which quadrant?", "options": ["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
     "ground_truth": "C"},
    {"id": 4, "dataset": "scannetpp", "scene_name": "abc", "question_type": "route_planning",
     "question": "Fill in the turns.", "options": ["A. left, right", "B. right, back", "C. back, left"],
     "ground_truth": "A"},
    {"id": 5, "dataset": "scannet", "scene_name": "scene0002", "question_type": "obj_appearance_order",
     "question": "First-time appearance order?", "options": ["A. cup, door", "B. door, cup"], "ground_truth": "B"},
    {"id": 6, "dataset": "scannet", "scene_name": "scene0002", "question_type": "object_abs_distance",
     "question": "Distance between the sofa and the stove (in meters)?", "options": None, "ground_truth": "2.9"},
    {"id": 7, "dataset": "scannet", "scene_name": "scene0002", "question_type": "object_rel_distance",
     "question": "Which is closest to the tv?", "options": ["A. chair", "B. stool"], "ground_truth": "A"},
    {"id": 8, "dataset": "scannet", "scene_name": "scene0002", "question_type": "object_size_estimation",
     "question": "Longest dimension of the stove (cm)?", "options": None, "ground_truth": "62"},
]
EVR = [{"problem_id": r["id"], "problem": r["question"], "data_type": "video",
        "problem_type": "multiple choice" if r["options"] else "regression", "original_question_type": r["question_type"],
        "options": r["options"], "process": "", "solution": f"<answer>{r['ground_truth']}</answer>",
        "path": f"./{r['dataset']}/{r['scene_name']}.mp4", "data_source": "VSIBench"} for r in OFFICIAL]
KEYS = ("id", "options", "letters", "gt", "video", "problem", "problem_type", "original_question_type")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in OFFICIAL))
    return tmp_path


def test_both_formats_load_to_the_same_items(files):
    evr, official = BENCH.load(files / "evr.json"), BENCH.load(files / "test.jsonl")
    assert project(evr, KEYS) == project(official, KEYS)


def test_oracle_constant_and_task_mean(files, tmp_path):
    items = BENCH.load(files / "test.jsonl")
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    rep = run_benchmark(BENCH, items, constant("A"), tmp_path)
    # rel_direction = mean(easy 1, hard 0) = 0.5, route 1, rel_distance 1; the numeric tasks and appearance order 0
    assert rep.parts["task/object_rel_direction"] == 0.5 and rep.parts["task/route_planning"] == 1.0
    assert rep.value == pytest.approx(2.5 / 8)
    rep = run_benchmark(BENCH, items, constant("5"), tmp_path / "five")
    assert rep.parts["task/object_counting"] == pytest.approx(0.6)


def test_prompts(files):
    counting, _, easy, *_ = BENCH.load(files / "evr.json")
    assert BENCH.prompted(counting, PromptContext()).text == (
        "These are frames of a video.\nHow many table(s) are in this room?\n"
        "Please answer the question using a single word or phrase.")
    assert BENCH.prompted(easy, PromptContext()).text == (
        "These are frames of a video.\nIs the tv to the left or the right?\nOptions:\nA. left\nB. right\n"
        "Answer with the option's letter from the given choices directly.")


@pytest.mark.parametrize("output, expected", [
    ("A", 1.0),
    ("a.", 1.0),
    ("A. left", 1.0),
    ("The answer is A", 0.0),              # [exec] first token "The"
    ("(A)", 0.0),
    ("B", 0.0),
])
def test_multiple_choice_first_token(output, expected):
    assert score("vsibench", output, EVR[2]) == expected


@pytest.mark.parametrize("output, gt, expected", [
    ("4", "4", 1.0),
    ("5", "4", 0.6),                       # [exec] |5-4|/4 = 0.25 ≤ 1-θ for θ ≤ 0.75: 6 of 10 (EasyVideoR1's "<": 0.5)
    ("3.5 meters.", "3.5", 1.0),           # [exec] first token, trailing "." removed
    ("about three", "3", 0.0),             # [exec] not a number
    ("There are 5 chairs", "5", 0.0),      # [exec] first token "There"
    ("3.5\nmeters", "3.5", 1.0),           # any whitespace splits (deviation)
    ("8", "4", 0.0),                       # relative error 1
    ("6", "4", 0.1),                       # relative error 0.5 ≤ 1-0.5 only at θ = 0.5 (with "<": 0)
    ("", "4", 0.0),
])
def test_numeric_mra(output, gt, expected):
    record = {**EVR[0], "solution": f"<answer>{gt}</answer>"}
    assert score("vsibench", output, record) == pytest.approx(expected)


def test_mra_thresholds():
    from evr1.eval.extractors.vsibench import THRESHOLDS, mra

    assert len(THRESHOLDS) == 10 and THRESHOLDS[0] == 0.5 and THRESHOLDS[-1] == pytest.approx(0.95)
    assert mra(0, 0) == 1.0 and mra(1, 0) == 0.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 5130
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and len([k for k in rep.parts if k.startswith("task/")]) == 8
    rep = BENCH.report([(i, BENCH.score_item("A", i)) for i in items])
    share = lambda t: (sum(i["gt"] == "A" for i in items if i["original_question_type"] == t)
                       / sum(i["original_question_type"] == t for i in items))
    direction = sum(share(f"object_rel_direction_{d}") for d in ("easy", "medium", "hard")) / 3
    expected = (share("obj_appearance_order") + share("object_rel_distance") + share("route_planning") + direction) / 8
    assert rep.value == pytest.approx(expected)
