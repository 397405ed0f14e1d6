"""Learning-rate schedule: linear warm-up, then constant or cosine (values worked out by hand)."""

import math

import pytest

from evr1.train.schedule import lr_at


def test_warmup_then_constant():
    assert [lr_at(s, base=1.0, total=10, warmup=4) for s in (1, 2, 4, 5, 10)] == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_cosine_after_warmup_reaches_the_floor():
    kw = dict(base=2.0, total=12, warmup=2, schedule="cosine", min_ratio=0.1)
    assert lr_at(2, **kw) == 2.0                                   # end of warm-up: full rate
    assert lr_at(7, **kw) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))  # halfway through the 10 decay steps
    assert lr_at(12, **kw) == pytest.approx(0.2)                   # the floor, min_ratio × base
    assert lr_at(3, **kw) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 10))))


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown lr schedule"):
        lr_at(5, base=1.0, total=10, schedule="linear")
