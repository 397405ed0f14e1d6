"""Math: symbolic equivalence with math-verify, under the per-item time limit.

Equal strings (ignoring spaces and `$`) score 1 without sympy. Otherwise both sides are parsed by
math-verify (bare LaTeX is wrapped in `$…$` first) and compared with `verify`, in the helper
process or under an alarm (`timeouts.run_limited`), because sympy can run away on inputs such
as `10^{10^{10}}`. A ground truth that does not look mathematical (letters only, like "Paris")
is compared as normalised text: math-verify would read "Paris" and "sirap" as the same product
of symbols. A question with `options` is scored as multiple choice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from evr1.rewards.extract import normalize_text
from evr1.rewards.multiple_choice import multiple_choice
from evr1.rewards.registry import FamilyResult, register
from evr1.rewards.timeouts import is_guarded, run_limited

_MATHY = re.compile(r"[\d\\^_+\-*/=<>()\[\]{}]")
_CANON = re.compile(r"\s+|\$")


def looks_mathematical(text: str) -> bool:
    """Digits, a LaTeX command or an operator: worth a symbolic comparison."""
    return _MATHY.search(text) is not None


def _canonical(text: str) -> str:
    return _CANON.sub("", text).rstrip(".")


@lru_cache(maxsize=1)
def load_math_verify() -> Any:
    """The math_verify module, imported once (`run_limited`'s set-up for `equivalent`)."""
    import math_verify  # imported on first use: it pulls in sympy and antlr
    import math_verify.grader
    import math_verify.parser

    # We run math-verify with its own signal timeouts off (they call alarm(0) and would cancel
    # ours, and they fail outside the main thread); silence its one-off warning about that.
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    return math_verify


def _parse(text: str) -> list:
    mv = load_math_verify()
    candidates = [text] if ("$" in text or "\\boxed" in text) else [f"${text}$", text]
    for candidate in candidates:
        parsed = mv.parse(candidate, parsing_timeout=None)
        if parsed:
            return parsed
    return []


def equivalent(truth: str, answer: str) -> tuple[bool, bool]:
    """(math-verify says `answer` equals `truth`, `answer` parsed). Module-level so it can run remotely."""
    predicted = _parse(answer)
    if not predicted:
        return False, False
    gold = _parse(truth)
    if not gold:
        return False, True
    return bool(load_math_verify().verify(gold, predicted, timeout_seconds=None)), True


def symbolic_match(truth: str, answer: str) -> tuple[bool, bool]:
    """Cheap checks first, then math-verify under the time limit: (equal, answer parsed)."""
    if _canonical(answer) == _canonical(truth) and answer.strip():
        return True, True
    if not looks_mathematical(truth) or not looks_mathematical(answer):
        expected = normalize_text(truth)
        return bool(expected) and normalize_text(answer) == expected, bool(answer.strip())
    return run_limited(equivalent, truth, answer, prepare=load_math_verify)


def prepare_math_verify() -> None:
    """The family's set-up: math-verify is imported where `equivalent` runs, outside the item's limit.

    In a pool worker that is this process; elsewhere it is the helper, which `run_limited` prepares
    itself (this process then never imports sympy)."""
    if is_guarded():
        load_math_verify()


@register("math", "mathematics", prepare=prepare_math_verify)
def math(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    if sample.get("options"):
        return multiple_choice(text, sample)
    truth = sample["answer"]
    if not text.strip():
        return FamilyResult(0.0, False)
    if not truth:
        return FamilyResult(0.0, True)
    equal, parsed = symbolic_match(truth, text)
    return FamilyResult(float(equal), parsed)
