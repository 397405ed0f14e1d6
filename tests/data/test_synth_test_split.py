"""The synthetic set's test split (`data.synth.test`): its own seeds, pixel-distinct from the train and
held-out items, written beside them, and leaving those two splits exactly as they were."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from evr1.config.data import SynthConfig
from evr1.data import make_synthetic

KINDS = ["colour", "motion", "flash_time", "appears"]
GEOMETRY = {"size": (56, 56), "fps": 2, "seconds": 4.0, "kinds": KINDS}  # conf/learning.yaml's clips


def _load(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _pixels(path: Path) -> str:
    """A digest of the decoded frames: equal clips decode equal, whatever their file names."""
    with av.open(str(path)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])])
    return hashlib.sha256(frames.tobytes()).hexdigest()


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    with_test = make_synthetic(root / "with", 48, seed=0, heldout=16, test=24, **GEOMETRY)
    without = make_synthetic(root / "without", 48, seed=0, heldout=16, **GEOMETRY)
    return root, with_test, without


def test_the_test_split_is_written_beside_the_others_in_equal_shares(sets):
    root, rep, without = sets
    assert rep.test_path == str(root / "with" / "test.jsonl") and without.test_path is None
    assert not (root / "without" / "test.jsonl").exists()
    test = _load(rep.test_path)
    assert len(test) == 24 and Counter(r["synth_kind"] for r in test) == {k: 6 for k in KINDS}
    assert rep.kinds["test"] == {k: 6 for k in KINDS}
    assert all(r["problem_id"].startswith("synth-test-") for r in test)
    # Every video record carries its clip's duration (8 frames at 2 fps), which the grounding
    # training reward normalises by.
    assert {r["duration"] for r in test + _load(rep.train_path)} == {4.0}


def test_asking_for_a_test_split_leaves_train_and_heldout_unchanged(sets):
    root, _, _ = sets
    for name in ("train.jsonl", "heldout.jsonl"):
        assert (root / "with" / name).read_bytes() == (root / "without" / name).read_bytes()


def test_the_three_splits_are_disjoint_in_ids_and_pixels(sets):
    root, rep, _ = sets
    splits = {"train": _load(rep.train_path), "heldout": _load(rep.heldout_path), "test": _load(rep.test_path)}
    ids = {name: {r["problem_id"] for r in records} for name, records in splits.items()}
    pixels = {name: {_pixels(root / "with" / r["videos"][0]) for r in records} for name, records in splits.items()}
    for name, records in splits.items():
        assert len(pixels[name]) == len(records), name  # no clip twice within a split either
    for a, b in (("train", "heldout"), ("train", "test"), ("heldout", "test")):
        assert not ids[a] & ids[b], (a, b)
        assert not pixels[a] & pixels[b], (a, b)


def test_the_test_split_is_deterministic_and_configurable(sets, tmp_path):
    _, rep, _ = sets
    again = make_synthetic(tmp_path, 48, seed=0, heldout=16, test=24, **GEOMETRY)
    assert Path(again.test_path).read_bytes() == Path(rep.test_path).read_bytes()
    assert SynthConfig().test == 0 and SynthConfig(test=64).test == 64
    with pytest.raises(ValueError):
        SynthConfig(test=-1)
    with pytest.raises(ValueError, match="test=-1"):
        make_synthetic(tmp_path / "bad", 4, heldout=1, test=-1)
