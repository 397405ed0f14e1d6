"""The synthetic QA set: split sizes, kinds, determinism, and every answer re-derived from decoded pixels."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from evr1.data import ingest, make_synthetic
from evr1.data.synth import IMAGE_KINDS, KINDS, VIDEO_KINDS
from evr1.data.synth_media import BACKGROUND, PALETTE

N, HELDOUT, IMAGE_FRACTION = 40, 0.25, 0.2  # → 30 train / 10 held-out; 6 and 2 image samples


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    return out, make_synthetic(out, N, seed=3, heldout=HELDOUT, image_fraction=IMAGE_FRACTION)


def load(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# --- reading answers back from pixels -------------------------------------------------------------


def decode(path: Path) -> tuple[np.ndarray, float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])
        return frames, float(stream.average_rate)


def foreground(pixels: np.ndarray) -> np.ndarray:
    """Pixels clearly unlike the plain background (H.264 noise stays well below 60 levels)."""
    return np.abs(pixels.astype(int) - np.array(BACKGROUND)).max(axis=-1) > 60


def nearest_colour(pixels: np.ndarray) -> str:
    mean = pixels[foreground(pixels)].reshape(-1, 3).mean(axis=0)
    return min(PALETTE, key=lambda name: np.linalg.norm(mean - np.array(PALETTE[name])))


def visible(frames: np.ndarray) -> np.ndarray:
    """Per-frame: is a shape on screen (more than a handful of foreground pixels)?"""
    return foreground(frames).reshape(len(frames), -1).sum(axis=1) > 10


def count_components(mask: np.ndarray) -> int:
    """4-connected components of a boolean mask (flood fill)."""
    seen = np.zeros_like(mask)
    count = 0
    for start in zip(*np.nonzero(mask)):
        if seen[start]:
            continue
        count += 1
        stack = [start]
        seen[start] = True
        while stack:
            y, x = stack.pop()
            for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= ny < mask.shape[0] and 0 <= nx < mask.shape[1] and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
    return count


def letter_of(record: dict, colour: str) -> str:
    return next(opt.split(". ", 1)[0] for opt in record["options"] if opt.split(". ", 1)[1] == colour)


def answer_moving_colour(media: np.ndarray, fps: float, rec: dict) -> str:
    return letter_of(rec, nearest_colour(media))


def answer_flash_count(media: np.ndarray, fps: float, rec: dict) -> str:
    on = visible(media).astype(int)
    return str(int(on[0] + (np.diff(on) == 1).sum()))  # rising edges, counting a flash at frame 0


def answer_direction(media: np.ndarray, fps: float, rec: dict) -> str:
    xs = [np.nonzero(foreground(frame))[1].mean() for frame in (media[0], media[-1])]
    return "Yes" if xs[1] > xs[0] else "No"


def answer_visible_interval(media: np.ndarray, fps: float, rec: dict) -> str:
    on = np.nonzero(visible(media))[0]
    assert (np.diff(on) == 1).all(), "the circle is visible over one contiguous interval"
    return json.dumps({"time": [round(on[0] / fps, 3), round((on[-1] + 1) / fps, 3)]})


def answer_image_colour(media: np.ndarray, fps: float, rec: dict) -> str:
    return letter_of(rec, nearest_colour(media))


def answer_image_count(media: np.ndarray, fps: float, rec: dict) -> str:
    return str(count_components(foreground(media)))


FROM_PIXELS = {
    "moving_colour": answer_moving_colour,
    "flash_count": answer_flash_count,
    "direction": answer_direction,
    "visible_interval": answer_visible_interval,
    "image_colour": answer_image_colour,
    "image_count": answer_image_count,
}


# --- tests ----------------------------------------------------------------------------------------


def test_split_sizes_and_counts(synth):
    out, report = synth
    train, heldout = load(report.train_path), load(report.heldout_path)
    assert (len(train), len(heldout)) == (30, 10)  # round(40 * 0.25) held out
    for split, records in (("train", train), ("heldout", heldout)):
        assert report.counts[split] == dict(Counter(r["problem_type"] for r in records))
        assert report.kinds[split] == dict(Counter(r["synth_kind"] for r in records))
        assert sum(r["data_type"] == "image" for r in records) == round(len(records) * IMAGE_FRACTION)


def test_every_kind_in_every_split(synth):
    _, report = synth
    assert set(FROM_PIXELS) == set(KINDS)  # a new kind must come with a pixel check here
    for split in ("train", "heldout"):
        assert set(report.kinds[split]) == set(VIDEO_KINDS) | set(IMAGE_KINDS)
        assert set(report.counts[split]) == {"multiple choice", "numerical", "boolean", "temporal grounding"}


def test_records_follow_the_schema(synth):
    out, report = synth
    for rec in load(report.train_path) + load(report.heldout_path):
        medium = rec["data_type"]
        assert rec["problem"].startswith(f"<{medium}>")
        assert isinstance(rec["answer"], str) and rec["answer"]
        paths = rec["videos"] + rec["images"]
        assert len(paths) == 1 and not Path(paths[0]).is_absolute() and (out / paths[0]).is_file()
        if rec["problem_type"] == "multiple choice":
            assert [o[:3] for o in rec["options"]] == ["A. ", "B. ", "C. ", "D. "]
            assert rec["answer"] in "ABCD"


def test_answers_are_decidable_from_pixels(synth):
    out, report = synth
    checked = Counter()
    for rec in load(report.train_path) + load(report.heldout_path):
        if rec["data_type"] == "video":
            media, fps = decode(out / rec["videos"][0])
            assert media.shape == (16, 64, 64, 3) and fps == 8  # 8 fps × 2 s at 64×64 by default
        else:
            media, fps = np.asarray(Image.open(out / rec["images"][0]).convert("RGB")), 0.0
        assert FROM_PIXELS[rec["synth_kind"]](media, fps, rec) == rec["answer"], rec["problem_id"]
        checked[rec["synth_kind"]] += 1
    assert set(checked) == set(KINDS)


def test_answer_values_vary(synth):
    """Decidable but not constant: a model cannot score by always giving one answer."""
    _, report = synth
    records = load(report.train_path)
    by_kind: dict[str, set[str]] = {}
    for rec in records:
        by_kind.setdefault(rec["synth_kind"], set()).add(rec["answer"])
    assert all(len(answers) >= 2 for answers in by_kind.values()), by_kind


def test_deterministic_for_a_seed(synth, tmp_path):
    out, report = synth
    again = make_synthetic(tmp_path / "again", N, seed=3, heldout=HELDOUT, image_fraction=IMAGE_FRACTION)
    for name in ("train.jsonl", "heldout.jsonl"):
        assert (out / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    for rec in load(report.heldout_path):
        rel = (rec["videos"] + rec["images"])[0]
        if rel.endswith(".mp4"):
            assert np.array_equal(decode(out / rel)[0], decode(tmp_path / "again" / rel)[0])
        else:
            assert (out / rel).read_bytes() == (tmp_path / "again" / rel).read_bytes()
    other = make_synthetic(tmp_path / "other", N, seed=4, heldout=HELDOUT, image_fraction=IMAGE_FRACTION)
    assert Path(other.train_path).read_bytes() != (out / "train.jsonl").read_bytes()


def test_splits_are_disjoint(synth):
    _, report = synth
    train, heldout = load(report.train_path), load(report.heldout_path)
    media = lambda records: {p for r in records for p in r["videos"] + r["images"]}  # noqa: E731
    assert not {r["problem_id"] for r in train} & {r["problem_id"] for r in heldout}
    assert not media(train) & media(heldout)
    assert len(media(train)) == len(train) and len(media(heldout)) == len(heldout)


def test_heldout_as_count_and_bad_split(tmp_path):
    report = make_synthetic(tmp_path, 6, heldout=2, image_fraction=0.0)
    assert (len(load(report.train_path)), len(load(report.heldout_path))) == (4, 2)
    assert report.kinds["train"].keys() <= set(VIDEO_KINDS)
    with pytest.raises(ValueError, match="heldout"):
        make_synthetic(tmp_path, 3, heldout=5)


def test_custom_geometry(tmp_path):
    report = make_synthetic(tmp_path, 4, heldout=0, image_fraction=0.0, size=(96, 48), fps=4, seconds=3.0)
    rec = load(report.train_path)[0]
    frames, fps = decode(tmp_path / rec["videos"][0])
    assert frames.shape == (12, 48, 96, 3) and fps == 4  # 4 fps × 3 s, height × width
    assert FROM_PIXELS[rec["synth_kind"]](frames, fps, rec) == rec["answer"]


def test_synthetic_set_ingests_cleanly(synth, tmp_path):
    out, report = synth
    result = ingest(
        [report.train_path, report.heldout_path], tmp_path / "s.lance", tmp_path / "r.lance", data_root=out
    )
    assert (result.read, result.accepted, result.rejected) == (N, N, 0)
    assert result.per_data_type == {"video": 32, "image": 8}  # 24 + 8 video, 6 + 2 image
