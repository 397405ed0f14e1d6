"""TempCompass (no shared file): the release's three rule-scored formats and EasyVideoR1's schema,
per-format rules, per-format / per-dimension accuracies and their average."""

import json

import pytest

from evr1.eval import PromptContext, get_benchmark, score
from evr1.eval.extractors.tempcompass import caption_matching, multi_choice, yes_no

from tests.eval.benchmarks.conftest import constant, run_benchmark

BENCH = get_benchmark("tempcompass")

RELEASE = {
    "multi-choice": {"1008": {"direction": [{"question": "Where does the car move?\nA. left\nB. right\nC. up",
                                             "answer": "B. right"}],
                              "speed": [{"question": "How fast is it?\nA. slow\nB. fast", "answer": "A. slow"}]}},
    "yes_no": {"1008": {"direction": [{"question": "Is the car moving left?", "answer": "no"}]}},
    "caption_matching": {"1008": {"speed": [{"question": "Which caption matches the video better?\n"
                                                         "Caption A: The car moves slowly.\nCaption B: The car moves fast.",
                                             "answer": "Caption A: The car moves slowly."}]}},
}
EVR = [
    {"problem_id": "multi-choice/1008/direction/0", "problem": "Where does the car move?", "problem_type": "multiple choice",
     "options": ["A. left", "B. right", "C. up"], "solution": "<answer>B</answer>", "path": "videos/1008.mp4",
     "tc_format": "multi-choice", "dimension": "direction"},
    {"problem_id": "multi-choice/1008/speed/0", "problem": "How fast is it?", "problem_type": "multiple choice",
     "options": ["A. slow", "B. fast"], "solution": "<answer>A</answer>", "path": "videos/1008.mp4",
     "format": "multi-choice", "dim": "speed"},
    {"problem_id": "yes_no/1008/direction/0", "problem": "Is the car moving left?", "problem_type": "boolean",
     "options": [], "solution": "<answer>no</answer>", "path": "videos/1008.mp4", "dimension": "direction"},
    {"problem_id": "caption_matching/1008/speed/0", "problem": "Which caption matches the video better?",
     "problem_type": "multiple choice", "options": ["A. The car moves slowly.", "B. The car moves fast."],
     "solution": "<answer>A</answer>", "path": "videos/1008.mp4", "task_type": "caption_matching",
     "dimension": "speed", "tc_label": "Caption"},
]


@pytest.fixture
def fixtures(tmp_path):
    (tmp_path / "questions").mkdir()
    for fmt, data in RELEASE.items():
        (tmp_path / "questions" / f"{fmt}.json").write_text(json.dumps(data))
    (tmp_path / "tempcompass.json").write_text(json.dumps(EVR))
    return tmp_path


def test_both_formats(fixtures):
    evr, official = BENCH.load(annotations_dir=fixtures), BENCH.load(fixtures)
    keys = ("id", "options", "letters", "gt", "video", "problem")
    assert sorted(({k: i[k] for k in keys} for i in evr), key=str) == sorted(({k: i[k] for k in keys} for i in official), key=str)


def test_prompts_per_format(fixtures):
    items = {i["id"]: i for i in BENCH.load(fixtures)}
    ctx = PromptContext()
    assert BENCH.prompted(items["yes_no/1008/direction/0"], ctx).text.endswith("left?\nPlease answer yes or no:")
    cm = BENCH.prompted(items["caption_matching/1008/speed/0"], ctx).text
    assert "\nCaption A: The car moves slowly.\nCaption B: The car moves fast.\nPlease directly give the best option:" in cm
    assert "\nA. left\nB. right\nC. up\nPlease directly give the best option:" in BENCH.prompted(
        items["multi-choice/1008/direction/0"], ctx).text


def test_oracle_constant_and_format_average(fixtures, tmp_path):
    items = BENCH.load(fixtures)
    assert run_benchmark(BENCH, items, BENCH.oracle, tmp_path).value == 1.0
    say_a, say_no = constant("A"), constant("no")  # both alive: run_benchmark names its store by id(answer)
    rep = run_benchmark(BENCH, items, say_a, tmp_path)
    # multi-choice 1/2, yes_no 0/1 ("A" is no yes/no answer), caption matching 1/1 → mean 0.5
    assert rep.metric == "format-mean" and rep.value == pytest.approx(0.5)
    assert rep.parts["tc_format/multi-choice"] == 0.5 and rep.parts["dimension/speed"] == 1.0
    assert rep.parts["format_dimension/multi-choice:direction"] == 0.0
    assert run_benchmark(BENCH, items, say_no, tmp_path).parts["tc_format/yes_no"] == 1.0


@pytest.mark.parametrize("fn, text, want", [
    (multi_choice, "B. right", "B"), (multi_choice, "right", "B"), (multi_choice, "B", "B"), (multi_choice, "B) right", "B"),
    (multi_choice, "C.", "C"), (multi_choice, "The car moves right", ""), (multi_choice, "", ""),
    (yes_no, "Yes, it is.", "yes"), (yes_no, "no", "no"), (yes_no, "It is not", ""),
    (caption_matching, "Caption A: The car moves slowly.", "A"), (caption_matching, "The car moves fast.", "B"),
    (caption_matching, "Caption B", "B"), (caption_matching, "Sentence A is right", "A"), (caption_matching, "B.", "B"),
    (caption_matching, "the first one", ""),
])
def test_rules(fixtures, fn, text, want):
    items = {i["id"]: i for i in BENCH.load(fixtures)}
    key = {multi_choice: "multi-choice/1008/direction/0", yes_no: "yes_no/1008/direction/0",
           caption_matching: "caption_matching/1008/speed/0"}[fn]
    assert fn(text, items[key]) == want


def test_score_api_on_raw_records():
    assert score("tempcompass", "No.", EVR[2]) == 1.0 and score("tempcompass", "yes", EVR[2]) == 0.0
    assert score("tempcompass", "Caption A", EVR[3]) == 1.0


def test_unknown_format_names_the_record():
    with pytest.raises(ValueError, match="tc_format"):
        score("tempcompass", "A", {**EVR[0], "tc_format": "captioning"})
