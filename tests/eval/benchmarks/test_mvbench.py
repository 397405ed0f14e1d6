"""MVBench: per-task JSON release and shared schema, official check_ans (empty fixed), task means."""

import json

import pytest

from evr1.eval import get_benchmark, score
from evr1.eval.benchmarks.mvbench import TASKS, task_of
from evr1.eval.extractors.mvbench import check_ans

from tests.eval.benchmarks.conftest import constant, project, run_benchmark

BENCH = get_benchmark("mvbench")

OFFICIAL = {
    "action_antonym": [
        {"video": "1.webm", "question": "What is the action?", "candidates": ["Piling up", "Scattering", "Not sure"],
         "answer": "Piling up"},
        {"video": "2.webm", "question": "What is shown?", "candidates": ["Showing", "Hiding", "Not sure"],
         "answer": "Hiding"}],
    "action_sequence": [
        {"video": "AJ.mp4", "question": "What happened after?", "candidates": ["Sat", "Ate", "Ran", "Slept"],
         "answer": "Ran", "start": 1.5, "end": 17.1}],
}
EVR = [
    {"problem_id": 1, "problem": "What is the action?", "problem_type": "multiple choice",
     "options": ["A. Piling up", "B. Scattering", "C. Not sure"], "solution": "<answer>A</answer>",
     "path": "./ssv2_video/1.webm", "answer": "Piling up", "data_type": "video"},
    {"problem_id": 2, "problem": "What is shown?", "problem_type": "multiple choice",
     "options": ["A. Showing", "B. Hiding", "C. Not sure"], "solution": "<answer>B</answer>",
     "path": "./ssv2_video/2.webm", "answer": "Hiding", "data_type": "video"},
    {"problem_id": 801, "problem": "What happened after?", "problem_type": "multiple choice",
     "options": ["A. Sat", "B. Ate", "C. Ran", "D. Slept"], "solution": "<answer>C</answer>",
     "path": "./star/Charades_v1_480/AJ.mp4", "answer": "Ran", "start": 1.5, "end": 17.1, "data_type": "video"},
]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "json").mkdir()
    for task, rows in OFFICIAL.items():
        (tmp_path / "json" / f"{task}.json").write_text(json.dumps(rows))
    (tmp_path / "evr.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats_load_to_the_same_items(fixtures):
    evr, official = BENCH.load(fixtures / "evr.json"), BENCH.load(fixtures)
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert project(evr, keys) == project(official, keys)
    assert [task_of(i) for i in evr] == [task_of(i) for i in official] == ["action_antonym"] * 2 + ["action_sequence"]
    assert official[2]["start"] == 1.5


def test_oracle_and_constant(fixtures, tmp_path):
    items = BENCH.load(fixtures)
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and rep.metric == "task-mean"
    rep = run_benchmark(BENCH, items, constant("(A)"), tmp_path)
    # action_antonym 1/2, action_sequence 0/1 → task mean 0.25, micro 1/3
    assert rep.value == pytest.approx(0.25) and rep.parts["micro_accuracy"] == pytest.approx(1 / 3)
    assert rep.parts["task/action_antonym"] == 0.5


@pytest.mark.parametrize("pred, gt, ok", [
    ("(C) Piling something up", "C", True),
    ("C) Piling something up", "C", True),
    ("C.", "C", True),
    ("c", "C", True),
    ("(B) Scattering", "C", False),
    ("", "C", False),            # [exec] the source counts an empty prediction as correct: fixed
    ("(", "C", False),           # a token without a letter is a substring of every option token: fixed
    ("This is a tricky one; B", "B", False),  # first token only (lmms-eval's mcq_acc would read A)
    ("Best option: (C)", "C", False),
])
def test_check_ans(pred, gt, ok):
    assert check_ans(pred, gt) is ok


def test_score_api_on_a_raw_record():
    assert score("mvbench", "(C) Ran", EVR[2]) == 1.0
    assert score("mvbench", "<think>A?</think>(C) Ran", EVR[2]) == 1.0
    assert score("mvbench", "", EVR[2]) == 0.0


def test_whole_shared_file(annotations, tmp_path):
    items = BENCH.load(annotations_dir=annotations)
    assert len(items) == BENCH.expected_items == 3586
    tasks = {task_of(i) for i in items}
    assert len(tasks) == 18 and not {"fine_grained_pose", "episodic_reasoning", "unknown"} & tasks
    for i in items:  # the problem_id block agrees with the task's official video folder
        assert i["video"].startswith(TASKS[task_of(i)].split("/")[0]), i["id"]
    rep = run_benchmark(BENCH, items, BENCH.oracle, tmp_path)
    assert rep.value == 1.0 and len([k for k in rep.parts if k.startswith("task/")]) == 18
    share = sum(i["gt"] == "A" for i in items) / len(items)
    assert run_benchmark(BENCH, items, constant("(A)"), tmp_path).parts["micro_accuracy"] == pytest.approx(share)


def test_segments_follow_the_official_protocol_and_not_the_easyvideor1_one():
    from evr1.eval import PromptContext

    record = {"problem_id": 1, "problem": "What happened after?", "problem_type": "multiple choice",
              "options": ["A. x", "B. y"], "solution": "<answer>A</answer>", "path": "./sta/sta_video/RPY8D.mp4",
              "start": 19.5, "end": 36.4}
    item = BENCH.item(record)
    assert BENCH.prompted(item, PromptContext(profile="official")).segments == ((19.5, 36.4),)
    assert BENCH.prompted(item, PromptContext(profile="easyvideor1")).segments == (None,)
    whole = BENCH.item({k: v for k, v in record.items() if k not in ("start", "end")})
    assert BENCH.prompted(whole, PromptContext(profile="official")).segments == (None,)
