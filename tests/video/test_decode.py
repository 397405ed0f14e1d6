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


def test_vfr_indices_follow_presentation_order(media):
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


# The bad-file corpus: each ends in a VideoDecodeError with a machine kind and a reason a person can act on.
BAD_FILES = [
    ("truncated", "corrupt", "truncated or corrupt MP4/MOV file"),
    ("truncated_faststart", "corrupt", "truncated: the header lists 32 frames but the file holds"),
    ("empty", "empty", "file is empty (0 bytes)"),
    ("audio_only", "no_video_stream", "no video stream (streams: audio)"),
    ("one_frame", "too_few_frames", "(the video has 1 frames)"),
    ("text", "not_media", "not a video file: no known container signature"),
    ("unknown_codec", "unsupported_codec", "unsupported codec"),
    ("zero_frames", "zero_frames", "video stream has zero frames"),
]


@pytest.mark.parametrize(("name", "kind", "reason"), BAD_FILES)
def test_bad_files_raise_clear_errors(media, name, kind, reason):
    with pytest.raises(VideoDecodeError) as info:
        decode_video(media[name], FrameParams())
    assert info.value.kind == kind
    assert reason in info.value.reason
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


# --- seeking vs decoding everything, threads, variable frame rate, ranges ------------------------


@pytest.mark.parametrize("name", ["clip", "long", "vfr", "bframes", "long_gop", "mkv"])
@pytest.mark.parametrize("nframes", [4, 8, 16])
def test_seek_and_decode_all_give_identical_frames(media, name, nframes):
    params = FrameParams(nframes=nframes, factor=16, min_pixels=256, max_pixels=64 * 48)
    every = decode_video(media[name], params, strategy="all")
    seek = decode_video(media[name], params, strategy="seek")
    assert every.frames.tobytes() == seek.frames.tobytes()
    assert every.frame_indices == seek.frame_indices and every.extra["pts_seconds"] == seek.extra["pts_seconds"]
    for frame, index in zip(seek.frames, seek.frame_indices):
        assert abs(grey_level(frame) - (index * 8) % 256) < 4, (name, index)


def test_auto_seeks_only_when_keyframes_are_dense(media):
    few = FrameParams(nframes=4, factor=16, min_pixels=256, max_pixels=64 * 48)
    # Keyframe every 10 of 120 frames, 4 samples ~40 apart: seeking decodes ~4×(≤10) frames, not 120.
    assert decode_video(media["bframes"], few).extra["decode_strategy"] == "seek"
    # One keyframe: every seek re-decodes from frame 0, so decoding everything is cheaper.
    assert decode_video(media["long_gop"], few).extra["decode_strategy"] == "all"
    # Dense sampling (60 of 120): consecutive samples share a GOP, decoding everything wins.
    dense = FrameParams(nframes=60, factor=16, min_pixels=256, max_pixels=64 * 48)
    assert decode_video(media["bframes"], dense).extra["decode_strategy"] == "all"
    # Matroska headers carry no frame count: the index cannot be cross-checked, so never seek.
    assert decode_video(media["mkv"], few, strategy="auto").extra["decode_strategy"] == "all"
    with pytest.raises(ValueError, match="strategy"):
        decode_video(media["clip"], few, strategy="sometimes")


@pytest.mark.parametrize("threads", [1, 2, 0])
def test_decoder_threads_do_not_change_frames(media, threads):
    params = FrameParams(fps=4.0, factor=28)
    baseline = decode_video(media["bframes"], params)
    assert decode_video(media["bframes"], params, threads=threads).frames.tobytes() == baseline.frames.tobytes()


def test_vfr_metadata_keeps_true_presentation_times(media):
    clip = decode_video(media["vfr"], FrameParams(nframes=4, factor=16, min_pixels=256, max_pixels=64 * 48))
    pts = [0, 10, 30, 35, 70, 90, 95, 100, 140, 150, 180, 200, 205, 210, 250, 260]  # conftest, units of 1/80 s
    assert clip.frame_indices == [0, 5, 10, 15]
    assert clip.extra["pts_seconds"] == pytest.approx([pts[i] / 80 for i in clip.frame_indices])
    # fps is the stream's average rate, as decord/torchcodec report it; Qwen's timestamps are index / fps.
    assert clip.fps == pytest.approx(probe_video(media["vfr"]).fps)


def test_metadata_returned_with_the_frames(media):
    clip = decode_video(media["long"], FrameParams(fps=2.0, factor=28))
    assert (clip.fps, clip.total_frames, clip.duration) == (16.0, 64, 4.0)
    assert clip.frame_indices == sample_frame_indices(64, 8, video_fps=16.0) and clip.num_frames == 8
    assert clip.extra["sample_fps"] == 2.0 and clip.extra["video_total_frames"] == 64
    # With a range, total frames / duration / sample fps describe the range, as qwen-vl-utils reports.
    ranged = decode_video(media["long"], NATIVE, start=1.0, end=3.0)
    assert (ranged.total_frames, ranged.duration) == (33, 33 / 16)
    assert ranged.extra["sample_fps"] == 4 / 33 * 16 and ranged.extra["video_total_frames"] == 64


def test_video_resize_is_torchvision_antialiased_bicubic(media):
    """qwen-vl-utils resizes the uint8 tensor with torchvision: float32 interpolate, clamp, round."""
    torch = pytest.importorskip("torch")
    raw = decode_video(media["clip"], NATIVE)  # native 48×64, no resize
    clip = decode_video(media["clip"], FrameParams(fps=2.0, factor=28))  # up to 280×392
    x = torch.from_numpy(raw.frames).permute(0, 3, 1, 2).float()
    ref = torch.nn.functional.interpolate(x, size=(280, 392), mode="bicubic", align_corners=False, antialias=True)
    ref = ref.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    assert clip.frames.tobytes() == ref.tobytes()
    # PIL's bicubic (the image path) would differ: the two are not interchangeable.
    from PIL import Image

    pil = np.asarray(Image.fromarray(raw.frames[0]).resize((392, 280), Image.Resampling.BICUBIC))
    assert not np.array_equal(pil, clip.frames[0])
