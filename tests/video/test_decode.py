"""PyAV decoding: counts, indices, metadata, shapes, VFR, images, and clear errors for bad files."""

from __future__ import annotations

import numpy as np
import pytest

from evr1.video import FrameParams, ImageDecodeError, VideoDecodeError, decode_video, load_image, probe_video
from evr1.video.sampling import sample_frame_indices

# No resize at factor 16 for 48×64 when min_pixels allows it: frames compare to what was encoded.
NATIVE = FrameParams(factor=16, min_pixels=16 * 16, max_pixels=64 * 48)


def grey_level(frame: np.ndarray) -> float:
    """Background grey written by tests/video/media.frame_pattern (8·index), read below the square."""
    return float(frame[30:, :, :].mean())


def test_probe(media):
    info = probe_video(media["clip"])
    assert (info.total_frames, info.fps, info.duration, info.height, info.width) == (16, 8.0, 2.0, 48, 64)
    assert info.codec == "h264"


def test_probe_counts_packets_when_header_has_no_count(media):
    # Matroska headers carry no frame count (stream.frames == 0); the probe counts packets instead.
    import av

    with av.open(str(media["mkv"])) as c:
        assert c.streams.video[0].frames == 0
    assert probe_video(media["mkv"]).total_frames == 16


def test_decode_count_indices_metadata(media):
    clip = decode_video(media["clip"], FrameParams(fps=2.0, factor=28))
    # 16 frames at 8 fps, 2 fps target → 4 frames at linspace(0, 15, 4) rounded.
    assert clip.frame_indices == [0, 5, 10, 15]
    assert (clip.fps, clip.total_frames, clip.duration) == (8.0, 16, 2.0)
    assert clip.extra["sample_fps"] == 2.0
    # Default video min_pixels 128·28² = 100352 scales 48×64 up to 280×392 (see test_sampling).
    assert clip.frames.shape == (4, 280, 392, 3) and clip.frames.dtype == np.uint8
    assert clip.frames.shape[1] % 28 == 0 and clip.frames.shape[2] % 28 == 0


def test_decoded_frames_are_the_indexed_ones(media):
    clip = decode_video(media["long"], NATIVE)  # 64 frames at 16 fps → 8 frames
    assert clip.frames.shape == (8, 48, 64, 3)
    assert clip.frame_indices == sample_frame_indices(64, 8, video_fps=16.0)
    for frame, index in zip(clip.frames, clip.frame_indices):
        assert abs(grey_level(frame) - (index * 8) % 256) < 4, index


def test_vfr_indices_follow_decoded_order(media):
    clip = decode_video(media["vfr"], FrameParams(fps=4.0, factor=16, min_pixels=256, max_pixels=64 * 48))
    info = probe_video(media["vfr"])
    assert clip.total_frames == 16 and clip.fps == pytest.approx(info.fps)
    # Whatever the irregular pts, frame k is the k-th encoded frame.
    for frame, index in zip(clip.frames, clip.frame_indices):
        assert abs(grey_level(frame) - index * 8) < 4, index


def test_nframes_and_range_and_old_rules(media):
    clip = decode_video(media["long"], FrameParams(nframes=6, factor=16, min_pixels=256, max_pixels=64 * 48))
    assert clip.frame_indices == [0, 13, 25, 38, 50, 63]  # torch.linspace(0, 63, 6).round()
    # Range 1 s .. 3 s at 16 fps: frames 16..48 (33 frames) → 33/16·2 = 4.125 → 4 frames.
    clip = decode_video(media["long"], NATIVE, start=1.0, end=3.0)
    assert clip.frame_indices == sample_frame_indices(64, 4, video_fps=16.0, start=1.0, end=3.0)
    assert clip.frame_indices[0] == 16 and clip.frame_indices[-1] == 48
    # 0.0.8 rules: same clip, default 0.0.8 budget (min 100352) at factor 28.
    clip = decode_video(media["clip"], FrameParams(factor=28, rules="0.0.8"))
    assert clip.frames.shape == (4, 280, 392, 3)


def test_decode_is_deterministic(media):
    a = decode_video(media["clip"], FrameParams())
    b = decode_video(media["clip"], FrameParams())
    assert np.array_equal(a.frames, b.frames)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("truncated", "corrupt"),
        ("empty", "empty"),
        ("audio_only", "no_video_stream"),
        ("one_frame", "too_few_frames"),
        ("text", "corrupt"),
    ],
)
def test_bad_files_raise_clear_errors(media, name, kind):
    with pytest.raises(VideoDecodeError) as info:
        decode_video(media[name], FrameParams())
    assert info.value.kind == kind
    assert str(media[name]) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_file_and_timeout(media, tmp_path):
    with pytest.raises(VideoDecodeError, match="does not exist") as info:
        decode_video(tmp_path / "nope.mp4", FrameParams())
    assert info.value.kind == "missing"
    with pytest.raises(VideoDecodeError, match="timed out") as info:
        decode_video(media["long"], FrameParams(), timeout=1e-9)
    assert info.value.kind == "timeout"


def test_load_image(media):
    img = load_image(media["image"], FrameParams(factor=28))
    assert img.shape == (56, 56, 3) and img.dtype == np.uint8  # 50×70 → 56×56 (test_sampling)
    same = load_image(media["image"].read_bytes(), FrameParams(factor=28))
    assert np.array_equal(img, same)
    # The image bounds are independent of the video budget.
    big = load_image(media["image"], FrameParams(factor=28, image_min_pixels=200 * 200, min_pixels=1))
    assert big.shape[0] * big.shape[1] >= 200 * 200 and big.shape[0] % 28 == 0


def test_load_image_rgba_on_white(media, tmp_path):
    from PIL import Image

    path = tmp_path / "clear.png"
    Image.new("RGBA", (56, 56), (10, 20, 30, 0)).save(path)  # fully transparent
    assert (load_image(path, FrameParams(factor=28)) == 255).all()
    assert load_image(media["image_rgba"], FrameParams(factor=28)).shape == (56, 56, 3)


def test_load_image_errors(media, tmp_path):
    with pytest.raises(ImageDecodeError) as info:
        load_image(media["text"], FrameParams())
    assert info.value.kind == "not_media"
    with pytest.raises(ImageDecodeError, match="empty"):
        load_image(b"", FrameParams())
    with pytest.raises(ImageDecodeError, match="does not exist"):
        load_image(tmp_path / "none.png", FrameParams())
