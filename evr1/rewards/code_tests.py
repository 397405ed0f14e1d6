"""What a code sample's tests are, and whether they can be judged without trusting the answer.

`split_test` cuts a test program into the checks the harness runs one by one; `classify_tests` says,
per sample and at ingest, which form its tests take (literal, bare or non-literal asserts, a
`check(candidate)` program, stdin/stdout cases) and whether that form can be judged safely
(`sandbox.py` explains how verdicts are decided).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SplitTest:
    kind: str  # "expr": the tests' sandbox reports `text`'s value, the scorer compares it with `expected`;
    text: str  # "truth": an assert's condition; "stmt": statements; "program": defines check(), not called
    expected: object = None


def _calls_check(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "check":
                return True
    return False


def _defines_check(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body)


def split_test(test: str) -> SplitTest:
    """`assert <expr> == <literal>` → evaluate `<expr>` in the tests' sandbox, compare with the literal here."""
    try:
        tree = ast.parse(test.strip(), mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return SplitTest("stmt", test)
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert):
        check = tree.body[0].test
        if isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], ast.Eq):
            for expr, literal in ((check.left, check.comparators[0]), (check.comparators[0], check.left)):
                try:
                    expected = ast.literal_eval(literal)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
                return SplitTest("expr", ast.unparse(expr), expected)
        return SplitTest("truth", ast.unparse(check))
    if _defines_check(tree) and not _calls_check(tree):
        return SplitTest("program", test)
    return SplitTest("stmt", test)


# ---- the test forms of a sample, for ingestion ------------------------------------------------


@dataclass(frozen=True)
class TestForm:
    """What kind of tests a code sample has and whether they give a trustworthy verdict.

    `form`: "none" (no tests: the identifier rule), "literal asserts", "bare asserts",
    "comparisons", "program", "stdio", "mixed" (several of the assert forms), "invalid".
    `judgeable` False means no verdict can be trusted (`reason` says why): such a sample should be
    rejected at ingestion; the code reward scores it only with `allow_unjudgeable_tests(True)`.
    """

    form: str
    judgeable: bool
    reason: str | None = None


def stdio_cases(tests: Any) -> list[tuple[str, str]] | None:
    """Stdin/stdout cases from `[{"input", "output"}, …]` or `{"inputs": […], "outputs": […]}`; else None."""
    if isinstance(tests, Mapping) and "inputs" in tests and "outputs" in tests:
        inputs, outputs = tests["inputs"], tests["outputs"]
        if isinstance(inputs, list) and isinstance(outputs, list) and len(inputs) == len(outputs):
            tests = [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]
        else:
            return None
    if not isinstance(tests, (list, tuple)) or not tests or not all(isinstance(t, Mapping) for t in tests):
        return None
    cases = []
    for case in tests:
        given = case.get("input", case.get("stdin"))
        wanted = case.get("output", case.get("expected_output", case.get("stdout")))
        if not isinstance(given, str) or not isinstance(wanted, str):
            return None
        cases.append((given, wanted))
    return cases


def _free_names(trees: list[ast.Module]) -> set[str]:
    loaded: set[str] = set()
    bound: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
    return {n for n in loaded - bound if not hasattr(builtins, n)}


def classify_tests(sample: Mapping[str, Any]) -> TestForm:
    """Classify a code sample's `tests` (and `entry_point`); ingestion rejects `judgeable=False`."""
    tests = sample.get("tests")
    if tests is None or (isinstance(tests, (str, list, tuple)) and not tests):
        return TestForm("none", True)
    if isinstance(tests, str):
        tests = [tests]
    cases = stdio_cases(tests)
    if cases is not None:
        return TestForm("stdio", True)
    if not isinstance(tests, (list, tuple)) or not all(isinstance(t, str) for t in tests):
        return TestForm("invalid", False, "tests must be strings (asserts or a test program) or "
                                          "stdin/stdout cases {'input': str, 'output': str}")
    tests = [t for t in tests if t.strip()]
    if not tests:
        return TestForm("none", True)
    trees, kinds = [], set()
    for index, text in enumerate(tests):
        try:
            trees.append(ast.parse(text.strip()))
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            return TestForm("invalid", False, f"test {index} does not parse: {exc}")
        kinds.add(split_test(text).kind)
    entry = sample.get("entry_point")
    if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
        return TestForm("invalid", False, f"entry_point {entry!r} is not a Python name")
    if isinstance(entry, str) and hasattr(builtins, entry):
        return TestForm("invalid", False, f"entry_point {entry!r} is a builtin, which the tests always use "
                                          "instead of the answer's")
    if "program" in kinds and entry is None:
        return TestForm("program", False, "the test program defines check(candidate) but never calls it, and "
                                          "the sample has no entry_point to pass to it")
    if "program" not in kinds and not _free_names(trees):
        return TestForm("invalid", False, "the tests never use a name the answer defines (any answer passes)")
    if "program" in kinds or "stmt" in kinds:
        form = "program"
    elif kinds == {"expr"}:
        form = "literal asserts"
    elif kinds == {"truth"}:
        bare = all(not isinstance(t.body[0].test, ast.Compare) for t in trees)  # type: ignore[attr-defined]
        form = "bare asserts" if bare else "comparisons"
    else:
        form = "mixed"
    return TestForm(form, True)
