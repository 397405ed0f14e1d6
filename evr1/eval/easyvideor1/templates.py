"""EasyVideoR1's prompt wording (spec §5.3, eval-benchmarks §2.0 E1), as data for `prompt.py`.

Source: the wording in `cyuQ1n/EasyVideoR1:eval/code/AsyncLLMEngine_eval_videobench_qwen3vl_multi_task.py`
(stored revision 65fb76d), which the spec's fragments quote. Heads take the question at `{q}`;
suffixes follow the head directly. Tables are keyed by our item's `problem_type` (lower-case, so the
reference's "OCR" key is "ocr" here); a type missing from a table takes its "free-form" entry, as there.

Gap filled: the stored revision predates OVO-Bench's REC/SSR/CRR prompts, which the spec only
summarises ("a fixed task description with the question inserted", then a per-mode answer format,
eval-benchmarks §2.1: "EVR copies [OVO-Bench's forward templates] verbatim"). `OVO_TASKS` is therefore
OVO-Bench's own forward-task wording (`JoeLeelyf/OVO-Bench:utils/OVOBench.py`, indentation removed);
the answer formats below it are OVO-Bench's lines (non-thinking) and the reference's own "Therefore,
the final answer is: $…" and `<answer>` phrasings (thinking, qwen25), composed as the spec describes.
"""

from __future__ import annotations

# ---- Qwen3 family (Qwen3-VL, Qwen3.5) ---------------------------------------------------------
QWEN3_MC = ("Select the best answer to the following multiple-choice question based on the video.\n"
            "Respond with only the letter (A, B, C, or D) of the correct option.\n"
            "Question: {q}")
QWEN3_OPEN = "Answer the following question based on the video.\nQuestion: {q}"
QWEN3_THINK_MC = ("You should watch and learn the video content. Then apply what you learned to select the best "
                  "answer to the following multiple-choice question based on the video.\n"
                  "Begin by explaining your reasoning process briefly.\n"
                  "Conclude by stating the final answer using the following format: "
                  "\"Therefore, the final answer is: $LETTER\" (without quotes), where $LETTER must be one of the options.\n"
                  "Question: {q}")
QWEN3_THINK_OPEN = ("You should watch and learn the video content. Then apply what you learned to answer the "
                    "following question based on the video.\n"
                    "Begin by explaining your reasoning process briefly.\n"
                    "Question: {q}")

_BEST = "\nThe best answer is: "
_TEMPORAL_BODY = "the time span in seconds as JSON within the <answer>...</answer> tags.\n"
_ST_BODY = "the time span in seconds and bounding boxes as JSON within the <answer>...</answer> tags.\n"
_ST_RULES = "You MUST output one bounding box for every integer second within the given time span (inclusive).\n"
_ST_NOTE = ("Note: Each key in 'boxes' must be an integer second within the span, and its value must be a "
            "4-number bounding box [x1, y1, x2, y2].")
_ST_EXAMPLE_BOXES = ("\"boxes\": {\"9\": [317, 422, 582, 997], \"10\": [332, 175, 442, 369], "
                     "\"11\": [340, 180, 450, 370]}}</answer>\n")
_TEMPORAL_EXAMPLE = "Example:\n<answer>{\"time\": [12.3, 25.7]}</answer>\n"


def _conclude(slot: str, where: str = "") -> str:
    return ("\nConclude by stating the final answer using the following format: "
            f"\"Therefore, the final answer is: {slot}\" (without quotes){where}.")


QWEN3_SUFFIX: dict[str, str] = {
    **dict.fromkeys(("multiple choice", "numerical", "ocr", "free-form", "open-ended", "regression"), _BEST),
    "temporal grounding": "\nPlease provide " + _TEMPORAL_BODY + _TEMPORAL_EXAMPLE,
    "spatial-temporal grounding": ("\nPlease provide " + _ST_BODY + _ST_RULES + "Example:\n<answer>{\"time\": [8.125, 13.483], "
                                   + _ST_EXAMPLE_BOXES + _ST_NOTE),
}
QWEN3_THINK_SUFFIX: dict[str, str] = {
    "multiple choice": _conclude("$LETTER", ", where $LETTER must be one of the options"),
    "numerical": _conclude("$NUMBER", ", where $NUMBER is your numerical answer"),
    "ocr": _conclude("$TEXT", ", where $TEXT is the recognized text"),
    "free-form": _conclude("$ANSWER"),
    "open-ended": _conclude("$ANSWER"),
    "regression": _conclude("$NUMBER", ", where $NUMBER is your numerical answer"),
    "temporal grounding": "\nConclude by providing " + _TEMPORAL_BODY + _TEMPORAL_EXAMPLE,
    "spatial-temporal grounding": ("\nConclude by providing " + _ST_BODY + _ST_RULES + "Example:\n<answer>{\"time\": [8, 13], "
                                   + _ST_EXAMPLE_BOXES + _ST_NOTE),
}

# ---- Qwen2.5 family (Qwen2-VL, Qwen2.5-VL): one reasoning template, thinking or not ----------------
QWEN25 = ("{q}\n"
          "Please think about this question as if you were a human pondering deeply. "
          "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', "
          "'oh, I see', 'let's break it down', etc, or other natural language thought expressions "
          "It's encouraged to include self-reflection or verification in the reasoning process. "
          "Provide your detailed reasoning between the <think> and </think> tags, and then give your "
          "final answer between the <answer> and </answer> tags.")
_NUMBER_TAGS = " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags."
_TEXT_TAGS = " Please provide your text answer within the <answer> </answer> tags."
QWEN25_SUFFIX: dict[str, str] = {
    "multiple choice": " Please provide only the single option letter (e.g., A, B, C, D, etc.) within the <answer> </answer> tags.",
    "numerical": _NUMBER_TAGS,
    "ocr": " Please transcribe text from the image/video clearly and provide your text answer within the <answer> </answer> tags.",
    "free-form": _TEXT_TAGS,
    "open-ended": _TEXT_TAGS,
    "regression": _NUMBER_TAGS,
    "temporal grounding": (" Please provide " + _TEMPORAL_BODY.rstrip("\n") + " Example: <answer>{\"time\": [12.3, 25.7]}</answer>"),
    "spatial-temporal grounding": (" Please provide " + _ST_BODY.rstrip("\n") + " Example: <answer>{\"time\": [8.125, 13.483], "
                                   "\"boxes\": {\"9\": [317, 422, 582, 997]}}</answer>"),
}

# ---- shared -------------------------------------------------------------------------------------
MC_CHOICES = " Possible answer choices:\n"
IMAGE_HINT = "The image for this question is at the end of the video.\n"

# ---- OVO-Bench forward tasks (reconstructed; see the module docstring) -----------------------------
OVO_TASKS: dict[str, str] = {
    "REC": ("You're watching a video in which people may perform a certain type of action repetively.\n"
            "The person performing this kind of action are referred to as 'they' in the following statement.\n"
            "You're task is to count how many times have different people in the video perform this kind of action in total.\n"
            "One complete motion counts as one.\n"
            "Now, answer the following question: {q}"),
    "SSR": ("You're watching a tutorial video which contain a sequential of steps.\n"
            "The following is one step from the whole procedures:\n"
            "{q}\n"
            "Your task is to determine if the man or woman in the video is currently performing this step."),
    "CRR": ("You're responsible of answering questions based on the video content.\n"
            "The following question are relevant to the latest frames, i.e. the end of the video.\n"
            "{q}\n"
            "Decide whether existing visual content, especially latest frames, i.e. frames that near the end of "
            "the video, provide enough information for answering the question."),
}
_NO_EXTRA = "\nDo not include any additional text or explanation in your response."
_YES_NO = "\nAnswer only with \u201cYes\u201d or \u201cNo\u201d." + _NO_EXTRA
OVO_FORMAT: dict[str, str] = {
    "REC": "\nProvide your answer as a single number (e.g., 0, 1, 2, 3\u2026) indicating the total count." + _NO_EXTRA,
    "SSR": _YES_NO,
    "CRR": _YES_NO,
}
_REASON = "\nBegin by explaining your reasoning process briefly."
OVO_THINK_FORMAT: dict[str, str] = {
    "REC": _REASON + _conclude("$NUMBER", ", where $NUMBER is the total count"),
    "SSR": _REASON + _conclude("$ANSWER", ", where $ANSWER is Yes or No"),
    "CRR": _REASON + _conclude("$ANSWER", ", where $ANSWER is Yes or No"),
}
OVO_QWEN25_FORMAT: dict[str, str] = {
    "REC": " Please provide the total count as a single number (e.g., 0, 1, 2, 3) within the <answer> </answer> tags.",
    "SSR": " Please provide Yes or No within the <answer> </answer> tags.",
    "CRR": " Please provide Yes or No within the <answer> </answer> tags.",
}
