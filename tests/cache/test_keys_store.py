"""Content-addressed keys and the Lance `frames` store."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import evr1.cache.keys as keys_module
from evr1.cache import content_hash, frame_key
from evr1.cache.keys import KEY_FIELDS
from evr1.cache.store import (
    FrameStore,
    append_rows,
    clip_row,
    commit_fragments,
    ensure_frames,
    existing_keys,
    open_frames,
    read_clip,
    write_fragment,
)
from evr1.video import RULES_VERSION, FrameParams, decode_video

# A different valid value for every FrameParams field.
CHANGED = {
    "fps": 1.0, "max_frames": 64, "min_frames": 2, "nframes": 8, "min_pixels": 1000, "max_pixels": 99999,
    "total_pixels": 123456, "factor": 32, "rules": "0.0.8", "image_min_pixels": 10, "image_max_pixels": 10**6,
}


def test_content_hash_is_sha256_of_bytes(media, tmp_path):
    assert content_hash(media["clip"]) == hashlib.sha256(media["clip"].read_bytes()).hexdigest()
    copy = shutil.copy(media["clip"], tmp_path / "renamed.mp4")
    assert content_hash(copy) == content_hash(media["clip"])
    # Rewriting a file (new size/mtime) is re-hashed, not served from the memo.
    path = tmp_path / "f.bin"
    path.write_bytes(b"a")
    first = content_hash(path)
    path.write_bytes(b"bb")
    os.utime(path, ns=(1, 1))
    assert content_hash(path) != first == hashlib.sha256(b"a").hexdigest()


def test_every_param_field_changes_the_key(monkeypatch):
    assert set(CHANGED) == {f.name for f in dataclasses.fields(FrameParams)}  # new fields must be listed
    base = FrameParams()
    for kind, fields in KEY_FIELDS.items():
        k0 = frame_key("abc", base, kind)
        for name, value in CHANGED.items():
            changed = frame_key("abc", dataclasses.replace(base, **{name: value}), kind)
            # A field that decides this kind's pixels changes the key; the others leave it alone, so a new
            # video budget does not re-decode images and new image bounds do not re-decode videos.
            assert (changed != k0) == (name in fields), (kind, name)
    k0 = frame_key("abc", base)
    assert frame_key("abd", base) != k0
    assert frame_key("abc", base, kind="image") != k0
    assert frame_key("abc", FrameParams()) == k0  # deterministic
    monkeypatch.setattr(keys_module, "RULES_VERSION", "bumped")
    assert frame_key("abc", base) != k0 and frame_key("abc", base, "image") != frame_key("abc", base, "video")
    with pytest.raises(ValueError, match="kind"):
        frame_key("abc", base, kind="audio")


def test_key_fields_per_kind():
    assert KEY_FIELDS["image"] == ("factor", "image_min_pixels", "image_max_pixels")
    assert "rules" in KEY_FIELDS["video"] and "image_max_pixels" not in KEY_FIELDS["video"]


def test_store_round_trip(media, tmp_path):
    uri = str(tmp_path / "frames.lance")
    assert open_frames(uri) is None and existing_keys(uri) == set()
    params = FrameParams(factor=28)
    clip = decode_video(media["clip"], params)
    digest = content_hash(media["clip"])
    key = frame_key(digest, params)
    v1 = append_rows(uri, [clip_row(key, digest, "video", clip, params, str(media["clip"]))])
    other = decode_video(media["long"], params)
    key2 = frame_key(content_hash(media["long"]), params)
    v2 = append_rows(uri, [clip_row(key2, "x", "video", other, params, str(media["long"]))])
    assert v2 == v1 + 1
    assert existing_keys(uri) == {key, key2}
    got = read_clip(uri, key, params)
    assert np.array_equal(got.frames, clip.frames) and got.frames.flags.writeable
    assert (got.fps, got.frame_indices, got.total_frames, got.duration) == (8.0, [0, 5, 10, 15], 16, 2.0)
    assert read_clip(uri, key2).frame_indices == other.frame_indices
    assert read_clip(uri, "0" * 64) is None
    row = open_frames(uri).to_table(filter=f"key = '{key}'").to_pylist()[0]
    assert row["shape"] == [4, 280, 392, 3] and row["timestamps"] == [0.0, 0.625, 1.25, 1.875]
    # The video metadata and the parameters are stored with the frames.
    assert (row["fps"], row["frame_indices"], row["total_frames"], row["duration"]) == (8.0, [0, 5, 10, 15], 16, 2.0)
    assert row["pts_seconds"] == [0.0, 0.625, 1.25, 1.875] and row["kind"] == "video"
    assert json.loads(row["params"])["factor"] == 28 and row["rules_version"] == RULES_VERSION
    assert row["content_hash"] == digest and row["source_path"] == str(media["clip"])
    assert got.extra["pts_seconds"] == row["pts_seconds"] and got.extra["cache_key"] == key
    # A row whose stored parameters differ from the caller's is refused, never returned.
    with pytest.raises(RuntimeError, match="built with params"):
        read_clip(uri, key, FrameParams(factor=32))


def test_uncommitted_fragments_are_invisible_until_committed(media, tmp_path):
    """Workers write data files; only the driver's commit makes them visible, atomically."""
    uri = str(tmp_path / "frames.lance")
    assert ensure_frames(uri).version == 1 and ensure_frames(uri).count_rows() == 0  # idempotent
    params = FrameParams(factor=28)
    rows, clips = [], []
    for name in ("clip", "long"):
        digest = content_hash(media[name])
        clips.append(decode_video(media[name], params))
        rows.append(clip_row(frame_key(digest, params), digest, "video", clips[-1], params, str(media[name])))
    fragments = write_fragment(uri, rows[:1]) + write_fragment(uri, rows[1:])
    assert json.loads(json.dumps(fragments)) == fragments  # plain JSON: cheap to ship through Ray
    store = FrameStore(uri)
    assert existing_keys(uri) == set() and rows[0]["key"] not in store
    version = commit_fragments(uri, fragments)
    assert version == 2 and existing_keys(uri) == {r["key"] for r in rows}
    assert store.read(rows[1]["key"]).frames.tobytes() == clips[1].frames.tobytes()  # the store refreshes on a miss
    assert commit_fragments(uri, []) == version  # nothing to commit: no new version
