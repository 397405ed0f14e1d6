"""Shared fixtures for the evr1.rl tests: both float dtypes and their tolerances."""

import pytest
import torch

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.fixture(params=[torch.float32, torch.float64], ids=["f32", "f64"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


@pytest.fixture
def tol(dtype: torch.dtype) -> dict[str, float]:
    """``assert_close`` keyword arguments suited to ``dtype``."""
    return {"rtol": TOLERANCE[dtype], "atol": TOLERANCE[dtype]}
