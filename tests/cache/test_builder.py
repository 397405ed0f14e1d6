"""Serial (workers=0) cache builds: rejects, incremental builds, dedup, crash + resume."""

from __future__ import annotations

import shutil

import lance
import numpy as np
import pytest

from evr1.cache import build_frame_cache, frame_key, content_hash
from evr1.cache.store import existing_keys, read_clip
from evr1.video import FrameParams, decode_video

PARAMS = FrameParams(factor=28)


@pytest.fixture
def root(media, tmp_path):
    """A data root holding the corpus, a second path to the same clip, and a file outside the root."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("clip", "long", "vfr", "truncated", "empty", "audio_only", "one_frame", "text", "image"):
        shutil.copy(media[name], data / media[name].name)
    (data / "sub").mkdir()
    shutil.copy(media["clip"], data / "sub" / "same_clip.mp4")
    (tmp_path / "outside.mp4").write_bytes(media["clip"].read_bytes())
    return data


GOOD = [("r-clip", "clip.mp4", "video"), ("r-long", "long.mp4", "video"), ("r-vfr", "vfr.mp4", "video"),
        ("r-img", "img.png", "image")]
BAD = {
    "r-trunc": ("truncated.mp4", "corrupt"),
    "r-empty": ("empty.mp4", "empty"),
    "r-audio": ("audio.mp4", "no_video_stream"),
    "r-one": ("one.mp4", "too_few_frames"),
    "r-text": ("notes.mp4", "corrupt"),
    "r-missing": ("missing.mp4", "missing"),
    "r-outside": ("../outside.mp4", "outside_root"),
}


def test_corpus_good_cached_bad_rejected(root, tmp_path):
    frames, rejects = str(tmp_path / "frames.lance"), str(tmp_path / "rejects.lance")
    items = GOOD + [(rid, path, "video") for rid, (path, _) in BAD.items()]
    report = build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, rejects_uri=rejects,
                               progress=False)
    assert (report.requested, report.unique, report.hits, report.decoded) == (11, 9, 0, 4)
    assert report.failed == len(BAD) == len(report.rejects)
    got = {r["record_id"]: r for r in report.rejects}
    for rid, (path, kind) in BAD.items():
        assert got[rid]["kind"] == kind and got[rid]["reason"].startswith(kind), got[rid]
        assert got[rid]["stage"] == "cache" and path.split("/")[-1] in got[rid]["path"]
    table = lance.dataset(rejects).to_table().to_pylist()
    assert sorted(r["record_id"] for r in table) == sorted(BAD)
    assert set(table[0]) == {"record_id", "path", "stage", "reason"}
    # Every good item is readable, with the frames the decoder gives.
    assert len(existing_keys(frames)) == 4 and report.version == lance.dataset(frames).version
    clip = read_clip(frames, frame_key(content_hash(root / "clip.mp4"), PARAMS), PARAMS)
    assert np.array_equal(clip.frames, decode_video(root / "clip.mp4", PARAMS).frames)
    image = read_clip(frames, frame_key(content_hash(root / "img.png"), PARAMS, "image"))
    assert image.frames.shape == (1, 56, 56, 3)


def test_incremental_dedup_and_param_change(root, tmp_path):
    frames = str(tmp_path / "frames.lance")
    items = GOOD + [("r-same", "sub/same_clip.mp4", "video")]
    first = build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, progress=False)
    # Two paths to identical bytes share a key: 5 records, 4 keys, 4 decodes.
    assert (first.requested, first.unique, first.decoded) == (5, 4, 4)
    again = build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, progress=False)
    assert (again.hits, again.decoded, again.version) == (4, 0, first.version)
    changed = build_frame_cache(items, frames, FrameParams(factor=28, fps=1.0), data_root=root, workers=0,
                                progress=False)
    assert (changed.hits, changed.decoded) == (0, 4)
    assert len(existing_keys(frames)) == 8


def test_killed_build_resumes(root, tmp_path):
    frames = str(tmp_path / "frames.lance")

    class Killed(Exception):
        pass

    def die(version):
        raise Killed(version)

    with pytest.raises(Killed):  # the process "dies" right after the first one-row commit
        build_frame_cache(GOOD, frames, PARAMS, data_root=root, workers=0, progress=False, commit_rows=1,
                          on_commit=die)
    survived = existing_keys(frames)
    assert len(survived) == 1 and lance.dataset(frames).count_rows() == 1
    resumed = build_frame_cache(GOOD, frames, PARAMS, data_root=root, workers=0, progress=False)
    assert (resumed.hits, resumed.decoded, resumed.failed) == (1, 3, 0)
    ds = lance.dataset(frames)
    assert ds.count_rows() == 4 and len(set(ds.to_table(columns=["key"]).column("key").to_pylist())) == 4


def test_timeout_and_bad_kind_are_rejects(root, tmp_path):
    report = build_frame_cache([("r-long", "long.mp4", "video"), ("r-k", "clip.mp4", "audio")],
                               str(tmp_path / "f.lance"), PARAMS, data_root=root, workers=0, timeout_s=1e-9,
                               progress=False)
    kinds = {r["record_id"]: r["kind"] for r in report.rejects}
    assert kinds == {"r-long": "timeout", "r-k": "bad_kind"} and report.decoded == 0
