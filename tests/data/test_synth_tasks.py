"""The learning task (evr1/data/synth_tasks.py): every answer is read back by the oracle from the
sampled, resized frames the model receives, answer spaces hold the answer, splits recombine, and the
chance level is what a uniform guess scores with the training reward."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from evr1 import rewards
from evr1.cache import FrameReader
from evr1.config import load_config
from evr1.data import make_synthetic
from evr1.data.synth_tasks import LEARNING_KINDS, chance_accuracy, oracle
from evr1.models.families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
KINDS = list(LEARNING_KINDS)


@pytest.fixture(scope="module")
def learning_set(tmp_path_factory):
    """The learning config's geometry and kinds, at a size a test can decode whole."""
    cfg = load_config(ROOT / "conf" / "learning.yaml")
    s = cfg.data.synth
    out = tmp_path_factory.mktemp("learning")
    rep = make_synthetic(out, 288, seed=s.seed, heldout=48, size=tuple(s.size), fps=s.fps, seconds=s.seconds,
                         kinds=KINDS)
    records = {split: [json.loads(x) for x in Path(path).read_text().splitlines()]
               for split, path in (("train", rep.train_path), ("heldout", rep.heldout_path))}
    return cfg, out, records


def test_the_oracle_answers_every_item_from_the_frames_the_model_sees(learning_set):
    cfg, out, records = learning_set
    family = FAMILIES[cfg.model.tiny.family]
    reader = FrameReader(None, cfg.cache.frame_params(family.factor), mode="decode-only", data_root=str(out))
    wrong, seen = [], Counter()
    for record in records["train"] + records["heldout"]:
        clip = reader.video(record["videos"][0])
        assert clip.frames.shape[0] == cfg.cache.max_frames  # every frame of the clip is sampled
        answer = oracle(record["synth_kind"], clip.frames, np.asarray(clip.frame_indices) / clip.fps)
        seen[record["synth_kind"]] += 1
        if answer != record["answer"]:
            wrong.append((record["problem_id"], record["synth_kind"], answer, record["answer"]))
    assert not wrong, wrong[:5]
    assert set(seen) == set(KINDS) and min(seen.values()) >= 40


def test_answer_spaces_hold_the_answer_and_answers_vary(learning_set):
    _, _, records = learning_set
    for record in records["train"] + records["heldout"]:
        assert record["answer"] in record["answer_space"], record
        assert record["trajectory"].endswith(f"<answer>{record['answer']}</answer>")
        assert rewards.compute_score(record["trajectory"], record)["accuracy"] == 1.0
    for kind in KINDS:  # every valid answer occurs in the training split
        answers = {r["answer"] for r in records["train"] if r["synth_kind"] == kind}
        space = next(r["answer_space"] for r in records["train"] if r["synth_kind"] == kind)
        assert answers == set(space), (kind, answers, space)


def test_heldout_is_disjoint_and_recombined(learning_set):
    _, out, records = learning_set
    train_ids = {r["problem_id"] for r in records["train"]}
    assert not train_ids & {r["problem_id"] for r in records["heldout"]}
    # No clip with a shape on screen is in both splits (a square that never flashes is a blank clip,
    # the same in every split).
    digests = {split: {hash((out / r["videos"][0]).read_bytes()) for r in rs
                       if not (r["synth_kind"] == "flashes" and r["answer"] == "0")} for split, rs in records.items()}
    assert not digests["train"] & digests["heldout"]


def test_chance_level_is_a_uniform_guess_scored_by_the_reward(learning_set):
    _, _, records = learning_set
    chance = chance_accuracy(records["heldout"], lambda text, s: rewards.compute_score(f"<answer>{text}</answer>", s)["accuracy"])
    assert chance == pytest.approx({"appears": 0.25, "colour": 0.25, "motion": 0.5, "flash_time": 0.25,
                                    "flashes": 1 / 3, "screen_colour": 0.25})


def test_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown synthetic kinds"):
        make_synthetic(tmp_path, 4, kinds=["colour", "nope"])
