"""FrameReader modes; a hit is byte-identical to decoding on the fly."""

from __future__ import annotations

import numpy as np
import pytest

from evr1.cache import CacheMiss, FrameReader, build_frame_cache
from evr1.cache.paths import MediaPathError
from evr1.video import FrameParams

PARAMS = FrameParams(factor=28, fps=4.0)


@pytest.fixture
def frames_uri(media, tmp_path):
    uri = str(tmp_path / "frames.lance")
    items = [("a", str(media["clip"]), "video"), ("b", str(media["image"]), "image")]
    report = build_frame_cache(items, uri, PARAMS, workers=0, progress=False)
    assert report.decoded == 2
    return uri


def test_hit_equals_on_the_fly_decode(media, frames_uri):
    cached = FrameReader(frames_uri, PARAMS, mode="cache-only")
    fresh = FrameReader(None, PARAMS, mode="decode-only")
    a, b = cached.video(media["clip"]), fresh.video(media["clip"])
    assert a.frames.dtype == b.frames.dtype == np.uint8 and a.frames.tobytes() == b.frames.tobytes()
    assert (a.fps, a.frame_indices, a.total_frames, a.duration) == (b.fps, b.frame_indices, b.total_frames,
                                                                    b.duration)
    for name in ("sample_fps", "pts_seconds", "video_total_frames"):
        assert a.extra[name] == b.extra[name], name
    assert cached.image(media["image"]).tobytes() == fresh.image(media["image"]).tobytes()
    assert cached.hits == 2 and cached.misses == 0


def test_prefer_cache_falls_back_and_cache_only_raises(media, frames_uri):
    prefer = FrameReader(frames_uri, PARAMS)
    clip = prefer.video(media["long"])  # not in the cache: decoded with the same rules
    assert clip.num_frames == 16 and prefer.misses == 1  # 64 frames at 16 fps, 4 fps target
    with pytest.raises(CacheMiss, match="no cached frames"):
        FrameReader(frames_uri, PARAMS, mode="cache-only").video(media["long"])
    with pytest.raises(CacheMiss):  # other parameters are a miss, never a stale hit
        FrameReader(frames_uri, FrameParams(factor=28), mode="cache-only").video(media["clip"])


def test_reader_confines_to_data_root(media, frames_uri, tmp_path):
    reader = FrameReader(frames_uri, PARAMS, data_root=tmp_path / "elsewhere")
    with pytest.raises(MediaPathError, match="outside the data root"):
        reader.video(media["clip"])
    with pytest.raises(ValueError, match="mode"):
        FrameReader(frames_uri, PARAMS, mode="sometimes")


@pytest.mark.parametrize("name", ["bframes", "vfr", "long_gop"])
def test_fallback_is_byte_identical_to_a_hit(media, tmp_path, name):
    """The builder's workers (one thread, any strategy) and the reader's fallback agree byte for byte."""
    uri = str(tmp_path / "frames.lance")
    params = FrameParams(factor=28, nframes=4)
    prefer = FrameReader(uri, params)
    miss = prefer.video(media[name])  # nothing cached yet: decoded on the fly
    assert prefer.misses == 1
    build_frame_cache([("x", str(media[name]), "video")], uri, params, workers=0, progress=False)
    hit = FrameReader(uri, params).video(media[name])
    assert hit.frames.tobytes() == miss.frames.tobytes() and hit.frame_indices == miss.frame_indices


def test_two_paths_one_entry(media, frames_uri, tmp_path):
    import shutil

    copy = shutil.copy(media["clip"], tmp_path / "renamed.mp4")
    reader = FrameReader(frames_uri, PARAMS, mode="cache-only")
    assert reader.video(copy).frames.tobytes() == reader.video(media["clip"]).frames.tobytes()
    assert reader.hits == 2


def test_images_use_their_own_pixel_bounds(media, tmp_path):
    uri = str(tmp_path / "frames.lance")
    # A tiny video budget must not shrink the image; the image bounds alone decide its size.
    params = FrameParams(factor=28, min_pixels=28 * 28, max_pixels=28 * 28 * 2, image_min_pixels=200 * 200)
    build_frame_cache([("i", str(media["image"]), "image")], uri, params, workers=0, progress=False)
    image = FrameReader(uri, params, mode="cache-only").image(media["image"])
    assert image.shape[0] * image.shape[1] >= 200 * 200 and image.shape[0] % 28 == 0
    assert image.tobytes() == FrameReader(None, params, mode="decode-only").image(media["image"]).tobytes()


def test_a_segment_is_sampled_from_its_seconds_in_every_mode(media, frames_uri):
    # "long": 64 frames at 16 fps (4 s). Seconds [1, 3] hold frames 16..48.
    for reader in (FrameReader(frames_uri, PARAMS, mode="cache-only"), FrameReader(None, PARAMS, mode="decode-only")):
        clip = reader.video(media["long"], start=1.0, end=3.0)
        assert clip.frame_indices and min(clip.frame_indices) >= 16 and max(clip.frame_indices) <= 48
        whole = reader.video(media["clip"])  # a whole video still comes from the cache when it has it
        assert whole.num_frames > 0
    seg = FrameReader(None, PARAMS, mode="decode-only").video(media["long"], start=1.0, end=3.0)
    again = FrameReader(frames_uri, PARAMS).video(media["long"], start=1.0, end=3.0)
    assert seg.frames.tobytes() == again.frames.tobytes()  # decoded with the same rules either way


def test_a_fifo_or_folder_is_refused_at_once_not_waited_on(media, frames_uri, tmp_path):
    """Issue 36: `evr1 eval` (and training) waited their timeout on a FIFO that ingest and cache reject
    at once; the reader refuses it at once with the same "not a regular file" reason."""
    import os
    import time

    from evr1.video import MediaDecodeError

    os.mkfifo(tmp_path / "pipe.mp4")
    (tmp_path / "folder.mp4").mkdir()
    reader = FrameReader(frames_uri, PARAMS)
    for name, kind, words in (("pipe.mp4", "not_a_file", "not a regular file"),
                              ("folder.mp4", "not_a_file", "not a regular file"),
                              ("missing.mp4", "missing", "file does not exist")):
        for read in (reader.video, reader.image):
            t0 = time.monotonic()
            with pytest.raises(MediaDecodeError) as err:
                read(tmp_path / name)
            assert time.monotonic() - t0 < 1.0
            assert err.value.kind == kind and words in err.value.reason and str(tmp_path / name) in err.value.reason
