"""evr1.video: qwen-vl-utils frame sampling/resizing rules, PyAV decoding, image loading."""

from evr1.video.clip import FrameParams, VideoClip
from evr1.video.decode import decode_video, load_image
from evr1.video.errors import ImageDecodeError, MediaDecodeError, VideoDecodeError
from evr1.video.probe import VideoInfo, probe_video
from evr1.video.sampling import RULES_VERSION

__all__ = [
    "FrameParams", "VideoClip", "decode_video", "load_image", "probe_video", "VideoInfo",
    "MediaDecodeError", "VideoDecodeError", "ImageDecodeError", "RULES_VERSION",
]
