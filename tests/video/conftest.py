"""Shared tiny media files (encoded once per session with PyAV)."""

from __future__ import annotations

import pytest

from tests.video.media import (
    write_audio_only,
    write_faststart_truncated,
    write_image,
    write_truncated,
    write_unknown_codec,
    write_video,
    write_zero_frames,
)


@pytest.fixture(scope="session")
def media(tmp_path_factory):
    """A dict of named files: good clips, a VFR clip, and the bad-file corpus."""
    d = tmp_path_factory.mktemp("media")
    files = {
        "clip": write_video(d / "clip.mp4"),  # 16 frames, 8 fps, 64×48, GOP 4
        "long": write_video(d / "long.mp4", n_frames=64, fps=16),
        # Irregular pts in units of 1/80 s: gaps of 1..5 ticks; decoded order is the index.
        "vfr": write_video(d / "vfr.mp4", pts=[0, 10, 30, 35, 70, 90, 95, 100, 140, 150, 180, 200, 205, 210, 250, 260]),
        "mkv": write_video(d / "clip.mkv"),
        # 120 frames with B-frames and a keyframe every 10: seeking pays off for few samples.
        "bframes": write_video(d / "bframes.mp4", n_frames=120, fps=24, gop=10, bframes=3),
        # x264's default keyframe interval (250): one keyframe, seeking never pays off.
        "long_gop": write_video(d / "long_gop.mp4", n_frames=120, fps=24, gop=None, bframes=3),
        "one_frame": write_video(d / "one.mp4", n_frames=1),
        "audio_only": write_audio_only(d / "audio.mp4"),
        "image": write_image(d / "img.png"),
        "image_rgba": write_image(d / "img_rgba.png", mode="RGBA"),
    }
    files["truncated"] = write_truncated(files["clip"], d / "truncated.mp4")
    files["truncated_faststart"] = write_faststart_truncated(d / "truncated_faststart.mp4")
    files["unknown_codec"] = write_unknown_codec(files["mkv"], d / "unknown_codec.mkv")
    files["zero_frames"] = write_zero_frames(files["mkv"], d / "zero_frames.mkv")
    files["empty"] = d / "empty.mp4"
    files["empty"].write_bytes(b"")
    files["text"] = d / "notes.mp4"
    files["text"].write_text("this is a text file renamed to .mp4\n" * 20)
    return files
