"""Code: Python run against the sample's tests in a sandbox; SVG/HTML by tag overlap.

Python with `tests`: a list of snippets such as `assert add(1, 2) == 3`, or one string holding a
whole test program (a HumanEval `check(candidate)` program gets the sample's `entry_point`), or
stdin/stdout cases (`[{"input": …, "output": …}]` or `{"inputs": […], "outputs": […]}`): the pass
fraction, run by `sandbox.run_python_tests` / `sandbox.run_stdio_tests` under bubblewrap and the
item's time limit (a run that exceeds it is a timed-out item, scored 0; with no sandbox on the
machine it raises `SandboxUnavailable`). Tests that `code_tests.classify_tests` calls unjudgeable (they
never use the answer, do not parse, or leave `check` uncalled without an `entry_point`) raise
`UnjudgeableTests` (an error, scored 0) unless `sandbox.allow_unjudgeable_tests(True)`. Without tests, the reference's rule:
the answer must compile; then the fraction of the ground truth's identifiers (names after `def`,
`class`, `import`, `from`) found in the answer, or 0.5 when the ground truth has none.
SVG and HTML: 0.7 × the fraction of the ground truth's tag names present in the answer + 0.3 ×
the length ratio (shorter / longer) of the two whitespace-free texts, as in the reference.
Markdown fences are tolerated: their contents are the code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evr1.rewards.registry import FamilyResult, register
from evr1.rewards.sandbox import (
    UnjudgeableTests,
    classify_tests,
    run_python_tests,
    run_stdio_tests,
    stdio_cases,
    unjudgeable_allowed,
)
from evr1.rewards.timeouts import ItemTimeout, current_timeout

_FENCED = re.compile(r"```[ \t]*[\w+#.-]*[ \t]*\n(.*?)```", re.DOTALL)
_DEFINED = re.compile(
    r"^\s*(?:async\s+)?def\s+(\w+)|^\s*class\s+(\w+)|^\s*from\s+([\w.]+)\s+import|^\s*import\s+([\w., ]+)",
    re.MULTILINE,
)
_TAG_NAME = re.compile(r"<\s*([A-Za-z][\w:.-]*)")
_SPACE = re.compile(r"\s+")


def extract_code(text: str) -> str:
    """The contents of all fenced code blocks, joined; the text itself when it has none."""
    if "```" in text:
        blocks = _FENCED.findall(text)
        if blocks:
            return "\n".join(b.strip("\n") for b in blocks).strip()
    return text.strip()


def _compiles(code: str) -> bool:
    try:
        compile(code, "<answer>", "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        return False
    return True


def _identifiers(code: str) -> set[str]:
    names: set[str] = set()
    for match in _DEFINED.finditer(code):
        def_name, class_name, from_module, imports = match.groups()
        if imports:
            for item in imports.split(","):
                words = item.split()
                if words:
                    names.add(words[-1] if "as" in words else words[0])
        else:
            names.add(def_name or class_name or from_module)
    return names


def _tests_of(sample: Mapping[str, Any]) -> list[str]:
    tests = sample.get("tests")
    if isinstance(tests, str):
        return [tests] if tests.strip() else []
    if isinstance(tests, (list, tuple)):
        return [t for t in tests if isinstance(t, str) and t.strip()]
    return []


@register("code", "coding", "python", "python code", unbox=False)
def python_code(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    code = extract_code(text)
    if not code or not _compiles(code):
        return FamilyResult(0.0, False)
    form = classify_tests(sample)
    if not form.judgeable and not unjudgeable_allowed():
        raise UnjudgeableTests(f"code tests cannot be judged ({form.form}): {form.reason}; reject the sample "
                               f"at ingestion or allow_unjudgeable_tests(True) to score it anyway")
    cases = stdio_cases(sample.get("tests"))
    tests = _tests_of(sample)
    if cases is not None or tests:
        entry = sample.get("entry_point")
        if cases is not None:
            run = run_stdio_tests(code, cases, timeout=current_timeout())
        else:
            run = run_python_tests(code, tests, timeout=current_timeout(),
                                   entry_point=entry if isinstance(entry, str) else None)
        if run.timed_out:
            raise ItemTimeout(f"code tests exceeded {current_timeout()} s")
        return FamilyResult(run.fraction, True)
    wanted = _identifiers(extract_code(sample["answer"]))
    if not wanted:
        return FamilyResult(0.5, True)
    present = sum(1 for name in wanted if re.search(r"\b" + re.escape(name) + r"\b", code))
    return FamilyResult(present / len(wanted), True)


def _markup_score(answer: str, truth: str, lower: bool) -> float:
    def tags(text: str) -> set[str]:
        names = _TAG_NAME.findall(text)
        return {n.lower() for n in names} if lower else set(names)

    wanted = tags(truth)
    overlap = len(wanted & tags(answer)) / len(wanted) if wanted else 0.0
    a, b = len(_SPACE.sub("", answer)), len(_SPACE.sub("", truth))
    ratio = min(a, b) / max(a, b) if max(a, b) else 0.0
    return 0.7 * overlap + 0.3 * ratio


@register("svg-code", "svg", unbox=False)
def svg_code(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    answer = extract_code(text)
    lowered = answer.lower()
    if "<svg" not in lowered or "</svg>" not in lowered:
        return FamilyResult(0.0, False)
    return FamilyResult(_markup_score(answer, extract_code(sample["answer"]), lower=False), True)


@register("html-code", "html", unbox=False)
def html_code(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    answer = extract_code(text)
    if not _TAG_NAME.search(answer):
        return FamilyResult(0.0, False)
    return FamilyResult(_markup_score(answer, extract_code(sample["answer"]), lower=True), True)
