"""What the `test_*_official.py` tables share: how their `official` column was made, and their check.

Each table's `official` column was produced by running the official code itself outside the project
(a scratch copy run with plain Python, each output first passed through lmms-eval's
lmms_eval/api/reasoning.py `strip_reasoning_tags` with the CLI default tags); each file names the
repository, commit and function. evr1 must agree on every row except those in the file's
`DEVIATIONS`, each of which is a listed deviation of the benchmark (or of the `official` profile's
reasoning-tag handling) and gives evr1's value. The rows cover dashes, clock formats, letter case,
phrase lists in several languages, `<answer>` tags and `<think>` blocks.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest


def agreement_test(ours: Callable[[str], object], table: list[tuple[str, object]], deviations: dict[str, object]):
    """A test, one case per row: evr1's value is the official one, or the listed deviation's."""

    @pytest.mark.parametrize("text, official", table)
    def test_agrees_with_official(text, official):
        assert ours(text) == deviations.get(text, official)

    return test_agrees_with_official
