"""The `easyvideor1` profile: EasyVideoR1's extractor, scorer, prompts and aggregation, bugs included.

Cases marked [exec] are the reference code's observed behaviour (eval-benchmarks §2.0 E2, spec §5.4).
"""

from __future__ import annotations

import numpy as np
import pytest

from evr1.eval import PromptContext, get_benchmark, score as eval_score
from evr1.eval.benchmark import read_records
from evr1.eval.easyvideor1 import aggregate, extract_answer, prompt, score
from evr1.eval.easyvideor1.score import THRESHOLDS, mean_relative_accuracy, normalize_number
from evr1.eval.items import normalise

MC, NUM, REG = "multiple choice", "numerical", "regression"
TG, STG = "temporal grounding", "spatial-temporal grounding"
CHARADES_GT = '<think>{"time": [24.0, 30.0], "boxes": {}}</think><[PLHD21_never_used_51bce0c785ca2f68081bfa7d91973934]>'
STVG_GT = '<answer>{"time": [10, 20], "boxes": {"10": [0, 0, 10, 10], "11": [0, 0, 10, 10]}}</answer>'


def item(ptype: str = MC, solution: str = "<answer>B</answer>", **extra) -> dict:
    options = extra.pop("options", ["A. Red", "B. Blue", "C. Green", "D. Black"] if ptype == MC else [])
    return normalise({"problem": extra.pop("problem", "What color is the car?"), "options": options,
                      "problem_type": ptype, "solution": solution, "path": "./v.mp4", **extra})


# ---- extract_answer ----------------------------------------------------------------------------
@pytest.mark.parametrize("output, ptype, expected", [
    ("the answer is a cat", MC, "A"),                                   # [exec] case-insensitive phrase
    ("The answer is a red car", "open-ended", "A"),                     # the same bug for every non-grounding type
    ("(B) Scattering of light by particles", MC, ""),                   # [exec] bracketed letters fail
    ("Therefore, the final answer is: (C)", MC, ""),                    # [exec]
    ("The correct answer is (B).", MC, ""),                             # [exec]
    ("Therefore, the final answer is: C", MC, "C"),
    ("So the best answer is d", MC, "D"),
    ("答案是 B", MC, "B"),
    ("<answer>B</answer>", MC, "B"),
    ("<answer>b.</answer>", MC, "B"),
    ("<answer>AB</answer>", MC, "AB"),                                  # substring test on "ABCDEFGHIJ"
    ("<answer>.</answer>", MC, ""),                                     # "" is a substring too
    ("<answer>Option B</answer>", MC, ""),                              # longer than 2: rules go on; nothing found
    ("<answer>blue car</answer>", "open-ended", "blue car"),            # non-MC: the tag as is
    ("<Answer>B</Answer>", MC, ""),                                     # the tag is case-sensitive; the line ends in ">"
    ("<think>maybe the answer is D</think>\nC", MC, "D"),               # phrases search the reasoning too
    ("<think>hmm</think>\n\nC", MC, "C"),
    ("<think>hmm</think> c", MC, "C"),                                  # a lone letter after </think>
    ("<think>hmm</think>B) blue", MC, "B"),
    ("I choose c", MC, "C"),
    ("select option E", MC, "E"),
    ("Looking at the video\nthe car is red\nA", MC, "A"),
    ("Answer: B", MC, "B"),                                             # a short line ending in a letter
    ("I", MC, "I"),
    ("K", MC, ""),                                                      # letters beyond J never extract
    ("<answer>K</answer>", MC, ""),
    ("The car in the video is painted in a bright shade that looks blue", MC, ""),
    ("", MC, ""),
    ("Therefore, the final answer is: 3.5", NUM, "3.5"),
    ("The best answer is: 12", NUM, "The best answer is: 12"),         # no lead-in: the whole text
    ("<think>about 5</think>7", NUM, "7"),
    ("<think>x</think>", NUM, "<think>x</think>"),                       # nothing left: the raw text
    ("Therefore, the answer is: ", "free-form", ""),                  # the phrase rule answers "" and ends the search
    ('<answer>{"time": [1, 2]}</answer>', TG, '{"time": [1, 2]}'),
    (CHARADES_GT, TG, '{"time": [24.0, 30.0], "boxes": {}}'),           # Charades' GT wrapper
    ('<think>first {"time": [1, 2]} then</think> {"time": [3, 4]}', TG, '{"time": [1, 2]}'),  # think JSON wins
    ('It spans {"time": [3, 4]} and {"time": [5, 6]}.', TG, '{"time": [3, 4]} and {"time": [5, 6]}'),  # greedy span
    ("from 3 to 5 seconds", TG, "from 3 to 5 seconds"),
])
def test_extract_answer(output, ptype, expected):
    assert extract_answer(output, ptype) == expected


# ---- score -------------------------------------------------------------------------------------
@pytest.mark.parametrize("output, record, expected", [
    # multiple choice: exact letters; an empty extraction compares the raw output
    ("the answer is a cat", item(solution="<answer>A</answer>"), 1.0),    # [exec]
    ("(B) Scattering", item(), 0.0),                                      # [exec] extracts "" → raw output ≠ "B"
    ("The correct answer is (B).", item(), 0.0),                          # [exec]
    ("Therefore, the final answer is: (C)", item(solution="<answer>C</answer>"), 0.0),  # [exec]
    ("B", item(), 1.0),
    ("<think>I pick A? no.</think>The answer is B", item(), 1.0),         # "answer is B" (rule 2) before "pick A" (rule 5)
    ("Therefore, the final answer is: B", item(), 1.0),
    ("", item(), 0.0),
    # numerical: "."/"," agreement, then normalize_number at 2 dp
    ("65", item(NUM, "<answer>65</answer>"), 1.0),
    ("65.0", item(NUM, "<answer>65</answer>"), 0.0),                     # [exec]
    ("1,000", item(NUM, "<answer>1000</answer>"), 0.0),                  # [exec]
    ("3.5 meters.", item(NUM, "<answer>3.5</answer>"), 0.0),             # [exec] unparseable
    ("3.5 meters", item(NUM, "<answer>3.5</answer>"), 1.0),
    ("Therefore, the final answer is: 12.97", item(NUM, "<answer>12.97</answer>"), 1.0),
    ("12.974", item(NUM, "<answer>12.97</answer>"), 1.0),
    ("about 13.0", item(NUM, "<answer>12.97</answer>"), 0.0),
    # regression: MRA, strict "<"
    ("5", item(REG, "<answer>4</answer>"), 0.5),                         # [exec] official ≤ gives 0.6
    ("4", item(REG, "<answer>4</answer>"), 1.0),
    ("0", item(REG, "<answer>0</answer>"), 1.0),
    ("1", item(REG, "<answer>0</answer>"), 0.0),
    ("about three", item(REG, "<answer>3</answer>"), 0.0),
    ("There are 3 chairs", item(REG, "<answer>3</answer>"), 1.0),       # the strips leave "3" (official VSI: 0)
    # OVO REC: all digit runs concatenated
    ("3", item("REC", "<answer>3</answer>"), 1.0),
    ("Therefore, the final answer is: 3", item("REC", "<answer>3</answer>"), 1.0),
    ("1 and 2", item("REC", "<answer>12</answer>"), 1.0),
    ("three", item("REC", "<answer>3</answer>"), 0.0),
    # OVO SSR / CRR: GT from ovo_type, upper-cased substring test
    ("yes", item("SSR", "<answer>Yes</answer>", ovo_type=1), 1.0),        # official is case-sensitive: 0
    ("Y", item("SSR", "<answer>Yes</answer>", ovo_type=1), 1.0),
    ("No", item("SSR", "<answer>Yes</answer>", ovo_type=1), 0.0),
    ("N", item("CRR", "<answer>No</answer>", ovo_type=0), 1.0),
    ("I don't know", item("CRR", "<answer>No</answer>", ovo_type=0), 1.0),  # "know" contains NO
    ("Yes", item("CRR", "<answer>Yes</answer>", ovo_type=0), 0.0),        # ovo_type decides, not the solution
    ("yes", item("CRR", "<answer>Yes</answer>"), 1.0),                    # without ovo_type: from the solution
    # temporal grounding: JSON IoU
    ('<answer>{"time": [24.0, 30.0]}</answer>', item(TG, CHARADES_GT), 1.0),
    ('<answer>{"time": [27.0, 30.0]}</answer>', item(TG, CHARADES_GT), 0.5),
    ('<answer>{"time": [30.0, 24.0]}</answer>', item(TG, CHARADES_GT), 0.0),  # reversed interval
    ('<answer>{"time": ["24", "30"]}</answer>', item(TG, CHARADES_GT), 1.0),  # float()-able strings count
    ("The event happens in 24 - 30 seconds.", item(TG, CHARADES_GT), 0.0),    # plain text
    ('<answer>{"time": [24, 30, 31]}</answer>', item(TG, CHARADES_GT), 0.0),
    ("<answer>[24, 30]</answer>", item(TG, CHARADES_GT), 0.0),
    # spatial-temporal grounding
    ('<answer>{"time": [10, 20], "boxes": {"10": [0, 0, 10, 10], "11": [0, 0, 10, 10]}}</answer>', item(STG, STVG_GT), 1.0),
    ('<answer>{"time": [10, 20], "boxes": {"10": [0, 0, 10, 10], "99": [5, 5, 6, 6]}}</answer>', item(STG, STVG_GT), 1.0),  # only keys in the GT count
    ('<answer>{"time": [10, 20], "boxes": {"10": [0, 0, 5, 10]}}</answer>', item(STG, STVG_GT), 0.75),
    ('<answer>{"time": [10, 20], "boxes": {"99": [0, 0, 10, 10]}}</answer>', item(STG, STVG_GT), 0.5),    # no common key
    ('<answer>{"time": [10, 20]}</answer>', item(STG, STVG_GT), 0.5),
    ('<answer>{"time": [15, 20]}</answer>', item(STG, '<answer>{"time": [10, 20], "boxes": {}}</answer>'), 0.5),  # tIoU alone
    # anything else scores 0 (the judge decides open-ended items)
    ("<answer>Dolly Zoom</answer>", item("open-ended", "<answer>Dolly Zoom</answer>"), 0.0),
    ("A", item("caption", "<answer>A</answer>"), 0.0),
])
def test_score(output, record, expected):
    assert score(output, record)["score"] == pytest.approx(expected)


def test_score_details():
    # "pick A" is rule 5, but rule 2 ("answer is B") comes first
    assert score("<think>I pick A? no.</think>The answer is B", item())["pred"] == "B"
    # the prediction is the extraction, or the raw output when that is empty
    assert score("(B) Scattering", item())["pred"] == "(B) Scattering"
    # temporal grounding also reports the IoU, for mIoU / R@m
    res = score('<answer>{"time": [27.0, 30.0]}</answer>', item(TG, CHARADES_GT))
    assert res == {"score": 0.5, "pred": '{"time": [27.0, 30.0]}', "iou": 0.5}
    # the ground truth can come from `gt` alone (an item with no solution)
    assert score("C", {**item(), "solution": None, "gt": "C"})["score"] == 1.0


@pytest.mark.parametrize("text, expected", [
    ("12.5", 12.5), ("about 12.5", 12.5), ("-3", -3.0), ("1,000", 1000.0), ("3.5 meters.", None),
    ("3.5 meters", 3.5), ("$7", 7.0), ("There are 3 chairs", 3.0), ("three", None), ("", None),
])
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


def test_mra_thresholds_are_the_reference_float32_values():
    expected = np.array([0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95], dtype=np.float32)
    assert THRESHOLDS.dtype == np.float32 and np.array_equal(THRESHOLDS, expected)


@pytest.mark.parametrize("pred, gt, expected", [
    (5, 4, 0.5), (4, 4, 1.0), (2, 4, 0.0), (0, 0, 1.0), (1e-7, 0, 0.0), (1e300, 1.0, 0.0), (float("nan"), 1.0, 0.0),
    (4.4, 4, float(np.float32(0.8))),                                # float32: |4.4−4|/4 lands just above 1−0.9
    (1e-9, 0, float(np.float32(0.9))),                               # the 1e-8 guard makes this 0.1
    (7.65, 9.7, float(np.float32(0.6))),                             # the reference's float32 mean, not 0.6
])
def test_mean_relative_accuracy(pred, gt, expected):
    assert mean_relative_accuracy(pred, gt) == expected


def test_mean_relative_accuracy_matches_the_reference_torch_arithmetic():
    torch = pytest.importorskip("torch")
    thresholds = torch.arange(0.5, 0.95 + 0.05 / 2, 0.05, dtype=torch.float32)
    rng = np.random.default_rng(0)
    cases = [(4.4, 4.0), (1e-9, 0.0), (5.0, 4.0), (7.65, 9.7)]
    for _ in range(300):
        g = float(rng.choice([rng.integers(0, 20), round(rng.uniform(0, 10), 1)]))
        cases.append((round(g * rng.uniform(0.3, 1.7), int(rng.integers(0, 3))), g))
    for p, g in cases:
        pt, gt = torch.tensor(p, dtype=torch.float32), torch.tensor(g, dtype=torch.float32)
        ref = ((torch.abs(pt - gt) / (torch.abs(gt) + 1e-8)) < (1 - thresholds)).float().mean().item()
        assert mean_relative_accuracy(p, g) == ref, (p, g)


# ---- prompts -----------------------------------------------------------------------------------
QWEN25_BODY = ("Please think about this question as if you were a human pondering deeply. Engage in an internal dialogue "
               "using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', 'let's break it down', etc, or other "
               "natural language thought expressions It's encouraged to include self-reflection or verification in the "
               "reasoning process. Provide your detailed reasoning between the <think> and </think> tags, and then give "
               "your final answer between the <answer> and </answer> tags.")
MC_Q = "What color is the car? Possible answer choices:\nA. Red\nB. Blue\nC. Green\nD. Black\n"


@pytest.mark.parametrize("family, thinking, expected", [
    ("qwen3", False, "Select the best answer to the following multiple-choice question based on the video.\n"
                     "Respond with only the letter (A, B, C, or D) of the correct option.\n"
                     f"Question: {MC_Q}\nThe best answer is: "),
    ("qwen3", True, "You should watch and learn the video content. Then apply what you learned to select the best answer "
                    "to the following multiple-choice question based on the video.\n"
                    "Begin by explaining your reasoning process briefly.\n"
                    "Conclude by stating the final answer using the following format: \"Therefore, the final answer is: "
                    "$LETTER\" (without quotes), where $LETTER must be one of the options.\n"
                    f"Question: {MC_Q}"),
    ("qwen25", False, f"{MC_Q}\n{QWEN25_BODY} Please provide only the single option letter (e.g., A, B, C, D, etc.) "
                      "within the <answer> </answer> tags."),
    ("qwen25", True, f"{MC_Q}\n{QWEN25_BODY} Please provide only the single option letter (e.g., A, B, C, D, etc.) "
                     "within the <answer> </answer> tags."),
])
def test_multiple_choice_prompt(family, thinking, expected):
    assert prompt(item(), PromptContext(profile="easyvideor1", family=family, thinking=thinking)) == expected


OPEN_HEAD = "Answer the following question based on the video.\nQuestion: Q?"
THINK_HEAD = ("You should watch and learn the video content. Then apply what you learned to answer the following question "
              "based on the video.\nBegin by explaining your reasoning process briefly.\nQuestion: Q?")
NUMBER_END = "\"Therefore, the final answer is: $NUMBER\" (without quotes), where $NUMBER is your numerical answer."
ST_NOTE = ("Note: Each key in 'boxes' must be an integer second within the span, and its value must be a 4-number "
           "bounding box [x1, y1, x2, y2].")
ST_BOXES = ('"boxes": {"9": [317, 422, 582, 997], "10": [332, 175, 442, 369], "11": [340, 180, 450, 370]}}</answer>\n')


@pytest.mark.parametrize("ptype, family, thinking, expected", [
    (NUM, "qwen3", False, OPEN_HEAD + "\nThe best answer is: "),
    (REG, "qwen3", False, OPEN_HEAD + "\nThe best answer is: "),
    ("open-ended", "qwen3", False, OPEN_HEAD + "\nThe best answer is: "),
    ("caption", "qwen3", False, OPEN_HEAD + "\nThe best answer is: "),          # unknown type: free-form
    (NUM, "qwen3", True, THINK_HEAD + "\nConclude by stating the final answer using the following format: " + NUMBER_END),
    (REG, "qwen3", True, THINK_HEAD + "\nConclude by stating the final answer using the following format: " + NUMBER_END),
    ("ocr", "qwen3", True, THINK_HEAD + "\nConclude by stating the final answer using the following format: "
                           "\"Therefore, the final answer is: $TEXT\" (without quotes), where $TEXT is the recognized text."),
    ("free-form", "qwen3", True, THINK_HEAD + "\nConclude by stating the final answer using the following format: "
                                 "\"Therefore, the final answer is: $ANSWER\" (without quotes)."),
    ("caption", "qwen3", True, THINK_HEAD + "\nConclude by stating the final answer using the following format: "
                               "\"Therefore, the final answer is: $ANSWER\" (without quotes)."),
    (TG, "qwen3", False, OPEN_HEAD + "\nPlease provide the time span in seconds as JSON within the <answer>...</answer> "
                         "tags.\nExample:\n<answer>{\"time\": [12.3, 25.7]}</answer>\n"),
    (TG, "qwen3", True, THINK_HEAD + "\nConclude by providing the time span in seconds as JSON within the "
                        "<answer>...</answer> tags.\nExample:\n<answer>{\"time\": [12.3, 25.7]}</answer>\n"),
    (STG, "qwen3", False, OPEN_HEAD + "\nPlease provide the time span in seconds and bounding boxes as JSON within the "
                          "<answer>...</answer> tags.\nYou MUST output one bounding box for every integer second within "
                          "the given time span (inclusive).\nExample:\n<answer>{\"time\": [8.125, 13.483], " + ST_BOXES + ST_NOTE),
    (STG, "qwen3", True, THINK_HEAD + "\nConclude by providing the time span in seconds and bounding boxes as JSON within "
                         "the <answer>...</answer> tags.\nYou MUST output one bounding box for every integer second within "
                         "the given time span (inclusive).\nExample:\n<answer>{\"time\": [8, 13], " + ST_BOXES + ST_NOTE),
    (NUM, "qwen25", False, "Q?\n" + QWEN25_BODY + " Please provide the numerical value (e.g., 42 or 3.14) within the "
                           "<answer> </answer> tags."),
    (REG, "qwen25", True, "Q?\n" + QWEN25_BODY + " Please provide the numerical value (e.g., 42 or 3.14) within the "
                          "<answer> </answer> tags."),
    ("ocr", "qwen25", False, "Q?\n" + QWEN25_BODY + " Please transcribe text from the image/video clearly and provide "
                             "your text answer within the <answer> </answer> tags."),
    ("open-ended", "qwen25", False, "Q?\n" + QWEN25_BODY + " Please provide your text answer within the <answer> </answer> tags."),
    ("caption", "qwen25", False, "Q?\n" + QWEN25_BODY + " Please provide your text answer within the <answer> </answer> tags."),
    (TG, "qwen25", False, "Q?\n" + QWEN25_BODY + " Please provide the time span in seconds as JSON within the "
                          "<answer>...</answer> tags. Example: <answer>{\"time\": [12.3, 25.7]}</answer>"),
    (STG, "qwen25", False, "Q?\n" + QWEN25_BODY + " Please provide the time span in seconds and bounding boxes as JSON "
                           "within the <answer>...</answer> tags. Example: <answer>{\"time\": [8.125, 13.483], "
                           "\"boxes\": {\"9\": [317, 422, 582, 997]}}</answer>"),
])
def test_prompt_per_type(ptype, family, thinking, expected):
    record = item(ptype, "<answer>1</answer>", problem="Q?", options=None)
    assert prompt(record, PromptContext(profile="easyvideor1", family=family, thinking=thinking)) == expected


REC_TASK = ("You're watching a video in which people may perform a certain type of action repetively.\n"
            "The person performing this kind of action are referred to as 'they' in the following statement.\n"
            "You're task is to count how many times have different people in the video perform this kind of action "
            "in total.\nOne complete motion counts as one.\n"
            "Now, answer the following question: How many times did they jump?")


@pytest.mark.parametrize("ptype, problem, family, thinking, start, end", [
    ("REC", "How many times did they jump?", "qwen3", False, REC_TASK,
     "in total.\nOne complete motion counts as one.\nNow, answer the following question: How many times did they jump?"
     "\nProvide your answer as a single number (e.g., 0, 1, 2, 3\u2026) indicating the total count."
     "\nDo not include any additional text or explanation in your response."),
    ("REC", "How many times did they jump?", "qwen3", True, REC_TASK,
     "\nBegin by explaining your reasoning process briefly.\nConclude by stating the final answer using the following "
     "format: \"Therefore, the final answer is: $NUMBER\" (without quotes), where $NUMBER is the total count."),
    ("SSR", "pull up the hair", "qwen3", False,
     "You're watching a tutorial video which contain a sequential of steps.\nThe following is one step from the whole "
     "procedures:\npull up the hair\nYour task is to determine if the man or woman in the video is currently performing "
     "this step.",
     "\nAnswer only with \u201cYes\u201d or \u201cNo\u201d.\nDo not include any additional text or explanation in your response."),
    ("CRR", "What does she take?", "qwen3", True,
     "You're responsible of answering questions based on the video content.\nThe following question are relevant to the "
     "latest frames, i.e. the end of the video.\nWhat does she take?\nDecide whether",
     "\"Therefore, the final answer is: $ANSWER\" (without quotes), where $ANSWER is Yes or No."),
    ("SSR", "pull up the hair", "qwen25", False, "You're watching a tutorial video",
     "currently performing this step.\n" + QWEN25_BODY + " Please provide Yes or No within the <answer> </answer> tags."),
    ("REC", "How many times did they jump?", "qwen25", True, REC_TASK + "\n" + QWEN25_BODY,
     " Please provide the total count as a single number (e.g., 0, 1, 2, 3) within the <answer> </answer> tags."),
])
def test_ovo_forward_prompts(ptype, problem, family, thinking, start, end):
    text = prompt(item(ptype, "<answer>1</answer>", problem=problem), PromptContext(family=family, thinking=thinking))
    assert text.startswith(start) and text.endswith(end)


def test_image_hint_and_option_styles():
    record = item(image_path="./images/x.png", problem="<image 1> Which sugar?", options=["A: aldose", "B: ketose"])
    text = prompt(record, PromptContext(family="qwen3"))
    assert text.startswith("The image for this question is at the end of the video.\nSelect the best answer")
    assert "Question: <image 1> Which sugar? Possible answer choices:\nA: aldose\nB: ketose\n\nThe best answer is: " in text
    assert prompt(record, PromptContext(family="qwen25")).startswith(
        "The image for this question is at the end of the video.\n<image 1> Which sugar?")


def test_prompt_leaves_braces_and_rejects_an_unknown_family():
    assert "Question: sum {a} and {b}?" in prompt(item(NUM, problem="sum {a} and {b}?"), PromptContext())
    with pytest.raises(ValueError, match="model family 'llava'"):
        prompt(item(), PromptContext(family="llava"))


# ---- aggregate ---------------------------------------------------------------------------------
def _pairs(rows):
    return [(item(ptype, **fields), res) for ptype, fields, res in rows]


def test_aggregate_mean_acc_mean_mra_and_failures():
    rep = aggregate(_pairs([
        (MC, {}, {"score": 1.0}), (MC, {}, {"score": 0.0}), (MC, {}, {"error": "engine failed"}),
        (REG, {"solution": "<answer>4</answer>"}, {"score": 0.5}), (REG, {"solution": "<answer>4</answer>"}, {"score": 1.0}),
        (TG, {"solution": CHARADES_GT}, {"score": 0.5, "iou": 0.5}),
    ]))
    assert rep.metric == "mean_acc"
    assert rep.value == pytest.approx(1.5 / 4)                   # the failed item counts 0 (EasyVideoR1 dropped it)
    assert rep.parts["mean_mra"] == 0.75
    assert rep.parts["problem_type/multiple choice"] == pytest.approx(1 / 3)
    assert rep.counts["failed"] == 1 and rep.counts["mean_acc"] == 4 and rep.counts["mean_mra"] == 2
    assert "ovo_total" not in rep.parts and "mean_mra" not in aggregate(_pairs([(MC, {}, {"score": 1.0})])).parts


def test_aggregate_ovo_is_macro_over_tasks_then_categories():
    ovo = lambda task, cat: {"ovo_task": task, "ovo_category": cat}  # noqa: E731
    rep = aggregate(_pairs([
        (MC, ovo("EPM", "backward"), {"score": 1.0}), (MC, ovo("EPM", "backward"), {"score": 0.0}),
        (MC, ovo("HLD", "backward"), {"score": 1.0}),
        (MC, ovo("STU", "realtime"), {"score": 1.0}),
        ("REC", {**ovo("REC", "forward"), "solution": "<answer>2</answer>"}, {"score": 0.0}),
        ("SSR", {**ovo("SSR", "forward"), "ovo_type": 1}, {"score": 1.0}),
    ]))
    assert rep.parts["ovo_task/EPM"] == 0.5 and rep.parts["ovo_category/backward"] == 0.75
    assert rep.parts["ovo_category/forward"] == 0.5 and rep.parts["ovo_category/realtime"] == 1.0
    assert rep.parts["ovo_total"] == pytest.approx(0.75)
    assert rep.value == pytest.approx(4 / 6)                     # mean_acc stays the headline
    assert rep.counts["ovo_task/EPM"] == 2


def test_aggregate_livesports_and_odv_breakdowns():
    rep = aggregate(_pairs([
        (MC, {"q_type_livesports": "What", "ocr_livesports": 0}, {"score": 1.0}),
        (MC, {"q_type_livesports": "What", "ocr_livesports": 1}, {"score": 0.0}),
        (MC, {"q_type_livesports": "Who", "ocr_livesports": 1}, {"score": 1.0}),
        (MC, {"odv_task": "t1", "odv_subtask": "s1"}, {"score": 1.0}),
        (MC, {"odv_task": "t1", "odv_subtask": "s2"}, {"score": 0.0}),
    ]))
    assert rep.parts["q_type_livesports/What"] == 0.5 and rep.parts["q_type_livesports/Who"] == 1.0
    assert rep.parts["ocr_livesports/0"] == 1.0 and rep.parts["ocr_livesports/1"] == 0.5
    assert rep.parts["odv_task/t1"] == 0.5 and rep.parts["odv_subtask/s1"] == 1.0
    assert rep.counts["q_type_livesports/What"] == 2 and "odv_task/unknown" not in rep.parts


# ---- through the registry and on the shared annotation files --------------------------------------
def test_videomme_under_the_easyvideor1_profile(annotations):
    bench = get_benchmark("videomme")
    records = read_records(annotations / "videomme.json")[:40]
    for record in records:
        gt = normalise(record)["gt"]
        assert eval_score("videomme", f"Therefore, the final answer is: {gt}", record, profile="easyvideor1") == 1.0
        assert eval_score("videomme", "the answer is a cat", record, profile="easyvideor1") == float(gt == "A")
        assert eval_score("videomme", f"({gt}) because", record, profile="easyvideor1") == 0.0
    one = bench.item(records[0])
    ctx = PromptContext(profile="easyvideor1", thinking=True)
    assert bench.prompted(one, ctx).text == prompt(one, ctx)
    assert "Possible answer choices:\n" in prompt(one, ctx) and bench.prompted(one, PromptContext()).text != prompt(one, ctx)
    pairs = [(bench.item(r), bench.score_item("A", bench.item(r), "easyvideor1")) for r in records]
    rep = bench.report(pairs, "easyvideor1")
    assert rep.metric == "mean_acc" and rep.value == pytest.approx(sum(p[0]["gt"] == "A" for p in pairs) / len(pairs))


def test_each_shared_file_scores_its_own_solution(annotations):
    """The solution as the output scores 1 for every type the reference scores (open-ended/caption: 0)."""
    judged = {"open-ended", "caption"}
    for path in sorted(annotations.glob("*.json*")):
        records = read_records(path)
        sample = records[:150] + [r for r in records if r.get("problem_type") in ("REC", "SSR", "CRR", "numerical", "regression")]
        for record in sample:
            it = normalise(record)
            want = 0.0 if it["problem_type"] in judged else 1.0
            assert score(str(record["solution"]), it)["score"] == want, (path.name, record.get("problem_id"))


def test_prompt_for_realread_records(annotations):
    mmmu = [r for r in read_records(annotations / "videommmu_with_image.json") if r.get("image_path")][0]
    assert prompt(normalise(mmmu), PromptContext()).startswith("The image for this question is at the end of the video.\n")
    charades = normalise(read_records(annotations / "charades_sta.json")[0])
    assert prompt(charades, PromptContext()) == (
        f"Answer the following question based on the video.\nQuestion: {charades['problem']}\nPlease provide the time span in "
        "seconds as JSON within the <answer>...</answer> tags.\nExample:\n<answer>{\"time\": [12.3, 25.7]}</answer>\n")
