"""Serial (workers=0) cache builds: rejects, incremental builds, dedup, crash + resume."""

from __future__ import annotations

import io
import json
import os
import shutil

import lance
import numpy as np
import pytest

from evr1.cache import build_frame_cache, frame_key, content_hash
from evr1.cache.store import clip_row, ensure_frames, existing_keys, read_clip, write_fragment
from evr1.video import FrameParams, decode_video

PARAMS = FrameParams(factor=28)


@pytest.fixture
def root(media, tmp_path):
    """A data root holding the corpus, a second path to the same clip, and a file outside the root."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("clip", "long", "vfr", "truncated", "truncated_faststart", "empty", "audio_only", "one_frame",
                 "text", "image", "unknown_codec", "zero_frames"):
        shutil.copy(media[name], data / media[name].name)
    (data / "sub").mkdir()
    shutil.copy(media["clip"], data / "sub" / "same_clip.mp4")
    (tmp_path / "outside.mp4").write_bytes(media["clip"].read_bytes())
    return data


GOOD = [("r-clip", "clip.mp4", "video"), ("r-long", "long.mp4", "video"), ("r-vfr", "vfr.mp4", "video"),
        ("r-img", "img.png", "image")]
# record id -> (path under the data root, reject kind, words the reason must contain)
BAD = {
    "r-trunc": ("truncated.mp4", "corrupt", "truncated or corrupt MP4/MOV file"),
    "r-trunc-fs": ("truncated_faststart.mp4", "corrupt", "truncated: the header lists 32 frames"),
    "r-empty": ("empty.mp4", "empty", "file is empty (0 bytes)"),
    "r-audio": ("audio.mp4", "no_video_stream", "no video stream (streams: audio)"),
    "r-one": ("one.mp4", "too_few_frames", "the video has 1 frames"),
    "r-text": ("notes.mp4", "not_media", "not a video file"),
    "r-codec": ("unknown_codec.mkv", "unsupported_codec", "unsupported codec"),
    "r-zero": ("zero_frames.mkv", "zero_frames", "zero frames"),
    "r-missing": ("missing.mp4", "missing", "file does not exist"),
    "r-outside": ("../outside.mp4", "outside_root", "outside the data root"),
}


def test_corpus_good_cached_bad_rejected(root, tmp_path):
    frames, rejects = str(tmp_path / "frames.lance"), str(tmp_path / "rejects.lance")
    items = GOOD + [(rid, path, "video") for rid, (path, _, _) in BAD.items()]
    report = build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, rejects_uri=rejects,
                               progress=False)
    # Missing and outside-root paths are rejected before hashing; the rest are unique keys.
    assert (report.requested, report.unique, report.hits, report.decoded) == (14, 12, 0, 4)
    assert report.failed == len(BAD) == len(report.rejects)
    got = {r["record_id"]: r for r in report.rejects}
    for rid, (path, kind, words) in BAD.items():
        assert got[rid]["kind"] == kind and got[rid]["reason"].startswith(f"{kind}: "), got[rid]
        assert words in got[rid]["reason"], got[rid]
        assert got[rid]["stage"] == "cache" and path.split("/")[-1] in got[rid]["path"]
    table = lance.dataset(rejects).to_table().to_pylist()
    assert {r["record_id"]: r["reason"] for r in table} == {rid: got[rid]["reason"] for rid in BAD}
    assert set(table[0]) == {"record_id", "path", "stage", "reason"}
    # Every good item is readable, with the frames the decoder gives.
    assert len(existing_keys(frames)) == 4 and report.version == lance.dataset(frames).version
    clip = read_clip(frames, frame_key(content_hash(root / "clip.mp4"), PARAMS), PARAMS)
    assert np.array_equal(clip.frames, decode_video(root / "clip.mp4", PARAMS).frames)
    image = read_clip(frames, frame_key(content_hash(root / "img.png"), PARAMS, "image"))
    assert image.frames.shape == (1, 56, 56, 3)


def test_all_failures_still_leave_a_readable_table(root, tmp_path):
    frames = str(tmp_path / "frames.lance")
    report = build_frame_cache([("r-empty", "empty.mp4", "video")], frames, PARAMS, data_root=root, workers=0,
                               progress=False)
    assert (report.decoded, report.failed) == (0, 1)
    assert lance.dataset(frames).count_rows() == 0 and report.version == lance.dataset(frames).version


def test_incremental_dedup_and_param_change(root, tmp_path):
    frames = str(tmp_path / "frames.lance")
    items = GOOD + [("r-same", "sub/same_clip.mp4", "video")]
    first = build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, progress=False)
    # Two paths to identical bytes share a key: 5 records, 4 keys, 4 decodes.
    assert (first.requested, first.unique, first.decoded) == (5, 4, 4)
    assert lance.dataset(frames).count_rows() == 4
    again = build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, progress=False)
    assert (again.hits, again.decoded, again.version) == (4, 0, first.version)
    # A changed video parameter misses for the 3 videos (never a stale hit); the image keeps its entry.
    changed = build_frame_cache(items, frames, FrameParams(factor=28, fps=1.0), data_root=root, workers=0,
                                progress=False)
    assert (changed.hits, changed.decoded) == (1, 3)
    # A changed image bound misses for the image only.
    image_changed = build_frame_cache(items, frames, FrameParams(factor=28, fps=1.0, image_max_pixels=28 * 28 * 4),
                                      data_root=root, workers=0, progress=False)
    assert (image_changed.hits, image_changed.decoded) == (3, 1)
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


def test_orphan_fragments_of_a_killed_build_are_ignored(root, tmp_path):
    """A kill between a worker's fragment write and the driver's commit leaves files no reader sees."""
    frames = str(tmp_path / "frames.lance")
    ensure_frames(frames)
    digest = content_hash(root / "clip.mp4")
    row = clip_row(frame_key(digest, PARAMS), digest, "video", decode_video(root / "clip.mp4", PARAMS), PARAMS,
                   str(root / "clip.mp4"))
    write_fragment(frames, [row])  # never committed
    assert existing_keys(frames) == set()
    report = build_frame_cache(GOOD, frames, PARAMS, data_root=root, workers=0, progress=False)
    assert (report.hits, report.decoded) == (0, 4) and lance.dataset(frames).count_rows() == 4


def test_progress_bar_reports_counts(root, tmp_path):
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    build_frame_cache(GOOD + [("r-empty", "empty.mp4", "video")], str(tmp_path / "f.lance"), PARAMS,
                      data_root=root, workers=0, progress=console)
    text = out.getvalue()
    assert "frame cache" in text and "5/5" in text and "4 decoded, 1 rejected" in text


def test_a_killed_builds_stray_files_are_removed_by_the_next_build(root, tmp_path):
    frames = str(tmp_path / "frames.lance")
    ensure_frames(frames)
    digest = content_hash(root / "clip.mp4")
    row = clip_row(frame_key(digest, PARAMS), digest, "video", decode_video(root / "clip.mp4", PARAMS), PARAMS,
                   str(root / "clip.mp4"))
    (stray,) = write_fragment(frames, [row])  # written by a worker, never committed: the driver was killed
    stray_file = tmp_path / "frames.lance" / "data" / stray["files"][0]["path"]
    assert stray_file.is_file()
    build_frame_cache(GOOD[:1], frames, PARAMS, data_root=root, workers=0, progress=False)
    assert not stray_file.exists()
    data_files = sorted(p.name for p in (tmp_path / "frames.lance" / "data").iterdir())
    committed = sorted(d.path for f in lance.dataset(frames).get_fragments() for d in f.data_files())
    assert data_files == committed and len(committed) == 1


def test_rejects_table_holds_one_row_per_media_and_reason(root, tmp_path):
    frames, rejects = str(tmp_path / "frames.lance"), str(tmp_path / "rejects.lance")
    items = [("a", "empty.mp4", "video"), ("b", "empty.mp4", "video"), ("c", "one.mp4", "video")]
    for _ in range(3):  # cache, train and eval each build again
        build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, rejects_uri=rejects, progress=False)
    table = sorted(lance.dataset(rejects).to_table().to_pylist(), key=lambda r: r["record_id"])
    assert [(r["record_id"], r["path"].rsplit("/", 1)[1]) for r in table] == [("a, b", "empty.mp4"),
                                                                              ("c", "one.mp4")]


def test_media_are_hashed_once_per_run_folder_and_within_the_timeout(root, tmp_path):
    from evr1.cache import keys

    frames = str(tmp_path / "lance" / "frames.lance")
    build_frame_cache(GOOD[:1], frames, PARAMS, data_root=root, workers=0, progress=False)
    index_file = tmp_path / "lance" / keys.INDEX_NAME
    (entry,) = [json.loads(line) for line in index_file.read_text().splitlines()]
    assert entry["sha256"] == content_hash(root / "clip.mp4") and entry["path"] == str(root / "clip.mp4")
    # Same size and mtime, other bytes: a new process (empty memo) trusts the index and reads nothing.
    clip = root / "clip.mp4"
    st = clip.stat()
    data = bytearray(clip.read_bytes())
    data[-1] ^= 0xFF
    clip.write_bytes(bytes(data))
    os.utime(clip, ns=(st.st_atime_ns, st.st_mtime_ns))
    keys._memo.clear()
    keys._indexes.clear()
    assert keys.content_hash(clip, index=keys.hash_index_for(frames)) == entry["sha256"]
    # Hashing a big file stops at the decode timeout and becomes a timeout reject.
    big = root / "big.mp4"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
    report = build_frame_cache([("r-big", "big.mp4", "video")], frames, PARAMS, data_root=root, workers=0,
                               timeout_s=1e-6, progress=False)
    (reject,) = report.rejects
    assert reject["kind"] == "timeout" and "hashing took longer than" in reject["reason"]


def test_a_folder_or_fifo_is_not_a_regular_file(root, tmp_path):
    (root / "folder.mp4").mkdir()
    os.mkfifo(root / "pipe.mp4")
    report = build_frame_cache([("d", "folder.mp4", "video"), ("f", "pipe.mp4", "video")], str(tmp_path / "f.lance"),
                               PARAMS, data_root=root, workers=0, progress=False)
    assert [(r["kind"], "not a regular file" in r["reason"]) for r in report.rejects] == [("not_a_file", True)] * 2


def test_failures_are_remembered_per_run_folder_and_retried_only_when_asked(root, tmp_path, monkeypatch):
    """Issue 36 item 4: a file that timed out in hashing or failed to decode is tried once; later builds
    (cache, train, eval) reject it again with the same reason without reading it, unless retry_failed,
    a longer timeout, or a changed file."""
    from evr1.cache import builder, keys

    frames, rejects = str(tmp_path / "lance" / "frames.lance"), str(tmp_path / "lance" / "rejects.lance")
    big = root / "big.mp4"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
    items = [("r-big", "big.mp4", "video"), ("r-one", "one.mp4", "video"), ("r-one-b", "one.mp4", "video"),
             ("r-clip", "clip.mp4", "video")]
    hashed, decoded = [], []
    real_hash, real_decode = builder.content_hash, builder._DECODERS["video"]
    monkeypatch.setattr(builder, "content_hash", lambda path, **kw: hashed.append(os.path.basename(path))
                        or real_hash(path, **kw))
    monkeypatch.setitem(builder._DECODERS, "video", lambda path, *a: decoded.append(os.path.basename(path))
                        or real_decode(path, *a))

    def build(items=items, **kwargs):
        hashed.clear(), decoded.clear()
        keys._memo.clear(), keys._indexes.clear()  # a new command: nothing remembered in memory
        return build_frame_cache(items, frames, PARAMS, data_root=root, workers=0, rejects_uri=rejects,
                                 progress=False, **kwargs)

    first = build(items=items[1:], timeout_s=120)  # hashes one.mp4 and clip.mp4 into the run folder's index
    assert {r["record_id"]: r["kind"] for r in first.rejects} == {"r-one": "too_few_frames",
                                                                 "r-one-b": "too_few_frames"}
    assert first.remembered == 0 and decoded == ["one.mp4", "clip.mp4"]

    second = build(timeout_s=1e-6)  # hashing big.mp4 times out; one.mp4 is not decoded again
    assert {r["record_id"]: r["kind"] for r in second.rejects} == {"r-big": "timeout", "r-one": "too_few_frames",
                                                                  "r-one-b": "too_few_frames"}
    assert second.remembered == 2 and "big.mp4" in hashed and decoded == []
    entries = [json.loads(line) for line in (tmp_path / "lance" / keys.FAILURES_NAME).read_text().splitlines()]
    assert sorted((e["path"].rsplit("/", 1)[1], e["scope"].split(":")[0], e["kind"]) for e in entries) == [
        ("big.mp4", "hash", "timeout"), ("one.mp4", "decode", "too_few_frames")]

    # The next command: the same rejects with the same reasons, nothing read again, the rejects table
    # does not grow (one row per media and reason).
    third = build(timeout_s=1e-6)
    assert "big.mp4" not in hashed and decoded == [] and third.remembered == 3 and third.failed == 3 and third.hits == 1
    assert sorted((r["record_id"], r["reason"]) for r in third.rejects) == \
        sorted((r["record_id"], r["reason"]) for r in second.rejects)
    assert lance.dataset(rejects).count_rows() == 2

    # A longer timeout tries the timed-out file again (it hashes, then fails to decode: remembered as such).
    fourth = build(timeout_s=120)
    assert "big.mp4" in hashed and decoded == ["big.mp4"] and fourth.remembered == 2
    assert {r["record_id"]: r["kind"] for r in fourth.rejects}["r-big"] == "not_media"

    # Asked to retry: every failed file is tried again.
    fifth = build(timeout_s=120, retry_failed=True)
    assert fifth.remembered == 0 and sorted(decoded) == ["big.mp4", "one.mp4"]

    # A changed file (another mtime) is a new file: tried again; the unchanged one stays remembered.
    st = (root / "one.mp4").stat()
    os.utime(root / "one.mp4", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    sixth = build(timeout_s=120)
    assert decoded == ["one.mp4"] and sixth.remembered == 1
