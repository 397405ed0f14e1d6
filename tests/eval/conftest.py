"""The shared benchmark annotation files (`../shared/benchmarks/annotations`), for every eval test.

Tests that need them skip, saying where they looked, when the folder is absent (the shared README
asks for this); every benchmark also has fixtures of the project's own, so nothing depends on it alone.
"""

from pathlib import Path

import pytest

ANNOTATIONS = Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks" / "annotations"


@pytest.fixture(scope="session")
def annotations() -> Path:
    if not ANNOTATIONS.is_dir():
        pytest.skip(f"shared benchmark annotations not found at {ANNOTATIONS}")
    return ANNOTATIONS
