"""Properties: no string ever makes the scorer raise, and every score lies in [0, 1].

The fast families are fuzzed with arbitrary text, with text built from the syntax the parsers look
for (tags, braces, boxed, letters, numbers), and with arbitrary ground truths. Math and code are
left out: they start processes per call, and their parsing is shared with the families tested.
"""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from evr1.rewards import compute_score, extract

FAST_TYPES = [
    "multiple choice",
    "numerical",
    "regression",
    "boolean",
    "temporal grounding",
    "spatial grounding",
    "spatial-temporal grounding",
    "tracking",
    "open-ended",
    "ocr",
    "llava",
    "svg-code",
    "html-code",
    "no such type",
    None,
]

PIECES = st.sampled_from(
    [
        "<answer>", "</answer>", "< answer >", "</ANSWER>", "<think>", "</think>", "\\boxed{", "{", "}",
        '"time"', '"boxes"', ":", "[", "]", ",", "-", "1", "2.5", "1e400", "NaN", "1/0", "%", "A", "b",
        "(C)", "I", "a", "yes", "no", "The answer is", "answer:", "twenty", "hundred", "\n", " ", "```",
        "response 1", "tie", '"', "\\", "0", "seconds", "from", "to", "<svg", "</svg>",
    ]
)  # fmt: skip
STRUCTURED = st.lists(PIECES, max_size=40).map("".join)
TEXT = st.one_of(st.text(max_size=300), STRUCTURED)
TRUTH = st.one_of(
    st.text(max_size=60),
    STRUCTURED,
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.dictionaries(st.sampled_from(["time", "boxes"]), st.lists(st.floats(allow_nan=True), max_size=4)),
)
OPTIONS = st.one_of(st.none(), st.lists(st.text(max_size=20), max_size=6), st.integers())


def _in_unit_interval(result: dict) -> bool:
    return set(result) >= {"overall", "accuracy", "format"} and all(0.0 <= v <= 1.0 for v in result.values())


@settings(max_examples=400, deadline=None)
@given(response=TEXT, truth=TRUTH, problem_type=st.sampled_from(FAST_TYPES), options=OPTIONS)
def test_scores_never_raise_and_stay_in_unit_interval(response, truth, problem_type, options):
    result = compute_score(response, {"problem_type": problem_type, "answer": truth, "options": options})
    assert _in_unit_interval(result)
    assert result["format"] in (0.0, 0.5, 1.0)


@settings(max_examples=100, deadline=None)
@given(response=st.one_of(st.none(), st.integers(), TEXT), record=st.one_of(st.none(), st.text(), st.lists(st.text())))
def test_malformed_records_score_zero_not_raise(response, record):
    result = compute_score(response, record)  # type: ignore[arg-type]
    assert _in_unit_interval(result)
    assert result["accuracy"] == 0.0


@given(content=st.text(max_size=80).filter(lambda s: "<" not in s))
def test_tagged_content_round_trips(content):
    assert extract.answer_tag(f"noise <answer>{content}</answer> tail") == content.strip()


@given(letter=st.sampled_from(string.ascii_uppercase[:8]), n_options=st.integers(8, 14))
def test_every_option_letter_scores_itself(letter, n_options):
    options = [f"{chr(65 + i)}. option {i}" for i in range(n_options)]
    sample = {"problem_type": "multiple choice", "answer": letter, "options": options}
    assert compute_score(f"<answer>{letter.lower()}</answer>", sample)["overall"] == 1.0
