"""Shared helpers for the reward tests."""

from __future__ import annotations

import pytest

from evr1.rewards import compute_score, registry


def sample(problem_type: str, answer, **fields) -> dict:
    return {"problem_type": problem_type, "answer": answer, **fields}


def tagged(text: str) -> str:
    return f"<think>Let me look at the video.</think><answer>{text}</answer>"


@pytest.fixture
def score():
    """compute_score with the default weights (0.9 accuracy, 0.1 format)."""
    return compute_score


@pytest.fixture
def isolated_registry(monkeypatch):
    """A copy of the registry for tests that register families; the original comes back after."""
    for name in ("_FAMILIES", "_ROUTES", "_SPELLINGS", "_PLUGIN_FILES", "_PREPARED"):
        monkeypatch.setattr(registry, name, type(getattr(registry, name))(getattr(registry, name)))
    registry._route.cache_clear()
    yield
    registry._route.cache_clear()



@pytest.fixture
def plugin(tmp_path, isolated_registry):
    """`plugin(source, function)`: write `source` as a reward plugin file and load it (pool workers load
    it again); the registry comes back and the pools stop after the test."""

    def load(source: str, function: str) -> None:
        path = tmp_path / f"plugin_{function}.py"
        path.write_text(source)
        registry.load_reward_function(f"{path}:{function}")

    yield load
    from evr1.rewards import shutdown_pools

    shutdown_pools()
