"""Learning-rate schedule: linear warm-up, then constant, cosine or step decay (values worked out by hand)."""

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


def test_step_decay_after_each_milestone():
    """MultiStepLR's rule: × gamma from the step after each milestone; absolute steps, so a run
    continued to a larger `total` keeps them (the cosine's shape, by contrast, stretches)."""
    kw = dict(base=1e-3, schedule="step", milestones=[450, 500], gamma=0.3)
    assert [lr_at(s, total=600, **kw) for s in (1, 450, 451, 500, 501, 600)] == pytest.approx(
        [1e-3, 1e-3, 3e-4, 3e-4, 9e-5, 9e-5])
    assert lr_at(451, total=600, **kw) == lr_at(451, total=900, **kw)
    assert lr_at(3, total=600, warmup=4, **kw) == pytest.approx(0.75e-3)  # the warm-up comes first


def test_step_schedule_config_is_checked():
    from pydantic import ValidationError

    from evr1.config.train import TrainerConfig

    assert TrainerConfig(lr_schedule="step", lr_milestones=[450], lr_gamma=0.3).lr_milestones == [450]
    with pytest.raises(ValidationError, match="lr_schedule=step needs trainer.lr_milestones"):
        TrainerConfig(lr_schedule="step")
    with pytest.raises(ValidationError, match=r"lr_milestones=\[500, 450\]: expected increasing"):
        TrainerConfig(lr_schedule="step", lr_milestones=[500, 450])
