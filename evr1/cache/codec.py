"""Lossless per-frame codec for the cached uint8 T×H×W×3 frames: one LZ4 block per frame.

LZ4 is chosen for its decoder: cramjam decompresses each block straight into the output array
(no intermediate buffer), at about the speed of a memory copy, so a compressed read costs little more
than a raw one. A frame whose block would not be smaller is stored raw (noise-like content does not
compress); a stored size equal to the raw frame size marks such a frame, so every frame of every row
is self-describing. The payload is the frames' stored bytes, concatenated in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import cramjam
import numpy as np

CODEC = "lz4-block-per-frame"


def encode_frames(frames: np.ndarray) -> tuple[bytes, list[int]]:
    """(payload, stored size of each frame) for uint8 frames of shape (T, ...)."""
    frames = np.ascontiguousarray(frames, dtype=np.uint8)
    frame_bytes = frames[0].nbytes if len(frames) else 0
    parts: list = []
    for frame in frames:
        block = cramjam.lz4.compress_block(frame, store_size=False)
        parts.append(memoryview(block) if len(block) < frame_bytes else memoryview(frame).cast("B"))
    return b"".join(parts), [len(p) for p in parts]


def decode_frames(payload, sizes: Sequence[int], shape: Sequence[int], what: str) -> np.ndarray:
    """The uint8 array of `shape` that `encode_frames` turned into `payload` (any buffer) and `sizes`.

    Raises ValueError naming `what` (the row) when the payload does not decode to exactly `shape`.
    """
    out = np.empty(tuple(shape), dtype=np.uint8)
    view = memoryview(payload).cast("B")
    if len(sizes) != out.shape[0] or sum(sizes) != len(view):
        raise ValueError(f"{what}: frame_sizes {len(sizes)} frames / {sum(sizes)} bytes do not match "
                         f"shape {list(shape)} and the {len(view)}-byte payload")
    flat = out.reshape(out.shape[0], -1)
    frame_bytes = flat.shape[1]
    position = 0
    for i, size in enumerate(sizes):
        block = view[position : position + size]
        if size == frame_bytes:
            flat[i] = np.frombuffer(block, dtype=np.uint8)
        else:
            try:
                written = cramjam.lz4.decompress_block_into(block, flat[i], output_len=frame_bytes)
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise ValueError(f"{what}: frame {i} does not decompress ({exc})") from exc
            if written != frame_bytes:
                raise ValueError(f"{what}: frame {i} decompressed to {written} bytes, expected {frame_bytes}")
        position += size
    return out
