"""Registry and routing: aliases of spec §1.3, unknown types, user families, weights."""

from __future__ import annotations

import pytest

from evr1.rewards import (
    FamilyResult,
    RewardWeights,
    check_weights,
    compute_score,
    compute_scores,
    get_family,
    known_problem_types,
    load_reward_function,
    register,
    registry,
    resolve,
)

from .conftest import sample, tagged


@pytest.mark.parametrize(
    ("problem_type", "family"),
    [
        # Spellings from the reference's table (spec §1.3), after lower/trim.
        ("multiple choice", "multiple choice"),
        ("multiple_choice", "multiple choice"),
        ("  Multiple Choice ", "multiple choice"),
        ("numerical", "numerical"),
        ("number", "numerical"),
        ("regression", "regression"),
        ("boolean", "boolean"),
        ("binary classification", "boolean"),
        ("OCR", "ocr"),
        ("math", "math"),
        ("mathematics", "math"),
        ("temporal grounding", "temporal grounding"),
        ("spatial-temporal grounding", "spatial-temporal grounding"),
        ("spatial grounding", "spatial grounding"),
        ("tracking", "tracking"),
        ("open-ended", "open-ended"),
        ("open_ended", "open-ended"),
        ("video qa", "open-ended"),
        ("video description", "open-ended"),
        ("free-form", "open-ended"),
        ("llava", "preference"),
        ("critic", "preference"),
        ("code", "code"),
        ("coding", "code"),
        ("svg-code", "svg-code"),
        ("html-code", "html-code"),
        ("generic", "generic"),
        ("segmentation", None),
        ("", None),
        (None, None),
        (3, None),
    ],
)
def test_resolve(problem_type, family):
    assert resolve(problem_type) == family


def test_known_problem_types_lists_spellings():
    known = known_problem_types()
    assert {"multiple choice", "multiple_choice", "video qa", "binary classification", "llava"} <= known
    assert all(resolve(t) is not None for t in known)


def test_unknown_type_uses_generic_and_is_counted():
    result = compute_scores(
        [tagged("kitchen"), tagged("B"), tagged("x")],
        [sample("Segmentation", "kitchen"), sample("multiple choice", "B"), {"answer": "x"}],
    )
    assert [s["accuracy"] for s in result.scores] == [1.0, 1.0, 1.0]
    assert result.metrics["unknown"] == 2.0
    assert result.metrics["unknown_type/segmentation"] == 1.0
    assert result.metrics["unknown_type/None"] == 1.0
    assert result.metrics["family/generic"] == 2.0


def test_register_rejects_clashing_alias():
    with pytest.raises(ValueError, match="already route"):
        register("my mc", "Multiple-Choice")(lambda text, s: FamilyResult(1.0, True))
    assert resolve("my mc") is None


def test_register_and_replace(isolated_registry):
    @register("counting", "count")
    def counting(text, s):
        return FamilyResult(float(text.strip() == s["answer"]), text.strip().isdigit())

    assert resolve("Count") == "counting"
    assert compute_score(tagged("3"), sample("count", "3")) == {"overall": 1.0, "accuracy": 1.0, "format": 1.0}
    assert compute_score(tagged("three"), sample("count", "3"))["format"] == 0.5
    register("boolean", replace=True)(lambda text, s: FamilyResult(0.25, True))
    assert compute_score(tagged("yes"), sample("boolean", "yes"))["accuracy"] == 0.25


PLUGIN = """
from evr1.rewards import FamilyResult, register

@register("plugin-upper", "shout")
def upper(text, sample):
    return FamilyResult(float(text == sample["answer"].upper()), text.isupper())

def main(text, sample):
    return upper(text, sample)
"""


def test_load_reward_function_registers_user_family(tmp_path, isolated_registry):
    path = tmp_path / "my_reward.py"
    path.write_text(PLUGIN)
    fn = load_reward_function(f"{path}:main")
    assert fn("HI", {"answer": "hi"}) == (1.0, True)
    assert load_reward_function(str(path)) is fn  # ":main" is the default; the module is reused
    assert get_family("shout").name == "plugin-upper"
    assert compute_score(tagged("HI"), sample("Shout", "hi"))["overall"] == 1.0


@pytest.mark.parametrize(
    ("reference", "error"),
    [
        ("/nonexistent/reward.py:main", FileNotFoundError),
        ("__FILE__:missing", AttributeError),
    ],
)
def test_load_reward_function_errors_name_the_reference(tmp_path, reference, error):
    path = tmp_path / "empty_reward.py"
    path.write_text("X = 1\n")
    reference = reference.replace("__FILE__", str(path))
    with pytest.raises(error, match="reward function"):
        load_reward_function(reference)


@pytest.mark.parametrize(
    ("accuracy_weight", "format_weight"),
    [(0.9, 0.2), (1.1, -0.1), (-0.5, 1.5), (float("nan"), 0.1), (0.5, 0.4)],
)
def test_invalid_weights_raise(accuracy_weight, format_weight):
    with pytest.raises(ValueError, match="reward weights"):
        RewardWeights(accuracy_weight, format_weight)
    with pytest.raises(ValueError):
        compute_score(tagged("B"), sample("mc", "B"), accuracy_weight=accuracy_weight, format_weight=format_weight)


def test_weights_combine_accuracy_and_format():
    assert check_weights(0.7, 0.3).overall(1.0, 0.5) == pytest.approx(0.85)
    result = compute_score(tagged("A"), sample("mc", "B"), accuracy_weight=0.5, format_weight=0.5)
    assert result == {"overall": 0.5, "accuracy": 0.0, "format": 1.0}
    assert compute_score(tagged("B"), sample("mc", "B"), accuracy_weight=1.0, format_weight=0.0)["overall"] == 1.0
