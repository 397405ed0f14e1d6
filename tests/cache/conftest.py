"""Reuse the tiny media corpus from tests/video."""

from tests.video.conftest import media  # noqa: F401  (session fixture)
