"""Shared helpers for the reward tests."""

from __future__ import annotations

import pytest

from evr1.rewards import compute_score


def sample(problem_type: str, answer, **fields) -> dict:
    return {"problem_type": problem_type, "answer": answer, **fields}


def tagged(text: str) -> str:
    return f"<think>Let me look at the video.</think><answer>{text}</answer>"


@pytest.fixture
def score():
    """compute_score with the default weights (0.9 accuracy, 0.1 format)."""
    return compute_score
