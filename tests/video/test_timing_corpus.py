"""A timing corpus written with PyAV: every file ends with correct timing (fps, duration, increasing
timestamps, upright frames) or is rejected with the reason; none is cached with a clock that lies."""

from __future__ import annotations

import numpy as np
import pytest

from evr1.video import FrameParams, VideoDecodeError, decode_video, probe_video
from tests.video.media import (
    write_backwards,
    write_raw_stream,
    write_rotated,
    write_video,
    write_zero_durations,
    write_zero_timescale,
)

PARAMS = FrameParams(factor=28, nframes=8)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("timing")
    base = write_video(d / "base.mp4", n_frames=16, fps=8)
    return {
        "base": base,
        "zero_durations": write_zero_durations(base, d / "zero_durations.mp4"),
        "raw_h264_8fps": write_raw_stream(d / "raw.h264"),
        "rotated_90": write_rotated(d / "rotated.mp4", 90),
        "rotated_270": write_rotated(d / "rotated_cw.mp4", -90),
        "zero_timescale": write_zero_timescale(base, d / "zero_timescale.mp4"),
        "backwards": write_backwards(d / "backwards.mkv"),
        "raw_mjpeg": write_raw_stream(d / "raw.mjpeg", "mjpeg", "mjpeg", pix_fmt="yuvj420p"),
    }


# name -> None (decodes with 8 fps, 2 s, timestamps i/8) or the words of its reject reason
EXPECTED = {
    "base": None,
    "zero_durations": None,
    "raw_h264_8fps": None,
    "rotated_90": None,
    "rotated_270": None,
    "zero_timescale": "broken track timing",
    "backwards": "timestamps go backwards: frame 12 at 1.500 s after frame 11 at 2.375 s",
    "raw_mjpeg": "no timestamps (a raw stream) and no frame rate",
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_file_is_correct_or_rejected(corpus, name):
    words = EXPECTED[name]
    if words is not None:
        with pytest.raises(VideoDecodeError) as err:
            decode_video(corpus[name], PARAMS)
        assert err.value.kind == "bad_timestamps" and words in err.value.reason, err.value.reason
        return
    clip = decode_video(corpus[name], PARAMS)
    assert (clip.fps, clip.duration, clip.total_frames) == (8.0, 2.0, 16)
    pts = clip.extra["pts_seconds"]
    assert pts == pytest.approx([i / 8 for i in clip.frame_indices])
    info = probe_video(corpus[name])
    assert (info.fps, info.duration, info.total_frames) == (8.0, 2.0, 16)
    # Each frame is the native frame its index says (the grey level encodes it), whatever the clock said.
    greys = [int(np.median(frame[-4:, :4, 0])) for frame in clip.frames]
    assert greys == pytest.approx([(i * 8) % 256 for i in clip.frame_indices], abs=6)


def red_centre(frame: np.ndarray) -> tuple[float, float]:
    """(row, column) of the red square's centre, as fractions of the height and width."""
    red = (frame[..., 0] > 180) & (frame[..., 1] < 110)
    rows, cols = np.nonzero(red)
    return rows.mean() / frame.shape[0], cols.mean() / frame.shape[1]


def test_rotation_is_applied_as_ffmpeg_displays_it(corpus):
    """The square sits top-left in the coded 64×48 picture; turned 90° counter-clockwise it is bottom-left,
    clockwise top-right, and the frames are portrait."""
    upright = decode_video(corpus["base"], PARAMS).frames[0]
    ccw = decode_video(corpus["rotated_90"], PARAMS).frames[0]
    cw = decode_video(corpus["rotated_270"], PARAMS).frames[0]
    assert upright.shape[0] < upright.shape[1] and ccw.shape[0] > ccw.shape[1] and cw.shape == ccw.shape
    row, col = red_centre(upright)
    assert row < 0.5 and col < 0.5
    row, col = red_centre(ccw)
    assert row > 0.5 and col < 0.5
    row, col = red_centre(cw)
    assert row < 0.5 and col > 0.5


def test_a_rate_the_bitstream_disagrees_with_is_noted_not_rejected(corpus):
    clip = decode_video(corpus["raw_h264_8fps"], PARAMS)
    assert "no timestamps (a raw stream): frames timed at 8 fps from the bitstream's rate" == clip.extra["timing"]
    assert "timing" not in decode_video(corpus["base"], PARAMS).extra


def test_zero_timescale_names_the_header_not_its_symptom(tmp_path):
    """Issue 36: an MP4 whose mdhd timescale is 0 and whose packets all demux (8 frames, one GOP) was
    reported as "too few frames" (FFmpeg timed it at 1 frame per 2,048 s); the reason names the header."""
    import numpy as np

    from evr1.data.synth_media import write_mp4
    from evr1.video.timing import mp4_video_timescales

    frames = np.random.default_rng(0).integers(0, 255, (8, 64, 64, 3), dtype=np.uint8)
    write_mp4(tmp_path / "ok.mp4", frames, fps=8)
    bad = write_zero_timescale(tmp_path / "ok.mp4", tmp_path / "zero.mp4")
    assert mp4_video_timescales(str(bad)) == [0] and mp4_video_timescales(str(tmp_path / "ok.mp4"))[0] > 0
    for params in (PARAMS, FrameParams(factor=28, fps=2.0, min_frames=4, max_frames=768)):
        with pytest.raises(VideoDecodeError) as err:
            decode_video(bad, params)
        assert err.value.kind == "bad_timestamps", err.value.reason
        assert "media header (mdhd) has timescale 0" in err.value.reason and "too few" not in err.value.reason
