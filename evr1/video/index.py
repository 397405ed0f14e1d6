"""A video's frame index from its packets, and the choice between seeking and decoding everything.

Frame i is the i-th frame in presentation order, i.e. the packet with the i-th smallest pts. This holds
for variable-frame-rate files and B-frames alike, where pts arithmetic (i / fps) would be wrong. The
index is built by demuxing only (no decoding: milliseconds for a 30 s 720p clip).

Seeking pays off when keyframes are dense relative to the sampling stride: each kept frame then costs
the decode from its preceding keyframe, not from the previous kept frame. `plan_strategy` counts the
frames each strategy must decode and picks the cheaper one (stack-feasibility §4: with x264's default
GOP of 250 seeking is 5× slower, with a GOP of 30 it wins).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# One seek (flush + demuxer repositioning) costs about as much as decoding this many frames.
SEEK_OVERHEAD_FRAMES = 4
# Seek only when it decodes at most this fraction of what decoding everything would.
SEEK_GAIN = 0.75


@dataclass(frozen=True)
class FrameIndex:
    """Presentation timestamps in presentation order, and the positions of the keyframes among them."""

    pts: tuple[int, ...]
    keyframes: tuple[int, ...]

    @property
    def total_frames(self) -> int:
        return len(self.pts)

    def keyframe_before(self, index: int) -> int:
        """Position of the last keyframe at or before frame `index` (0 when none is marked)."""
        at = bisect.bisect_right(self.keyframes, index) - 1
        return self.keyframes[at] if at >= 0 else 0


def build_index(packets: list[tuple[int | None, bool, bool]]) -> FrameIndex | None:
    """Index from demuxed (pts, is_keyframe, is_discard) packets; None when pts are missing or repeated
    (then seeking is unsafe and the decoder's output order is the only truth)."""
    kept = [(pts, key) for pts, key, discard in packets if not discard]
    if not kept or any(pts is None for pts, _ in kept):
        return None
    ordered = sorted(pts for pts, _ in kept)
    if len(set(ordered)) != len(ordered):
        return None
    position = {p: i for i, p in enumerate(ordered)}
    keyframes = tuple(sorted(position[pts] for pts, key in kept if key))
    if not keyframes:
        return None
    return FrameIndex(tuple(ordered), keyframes)


def decode_all_cost(wanted: list[int]) -> int:
    """Frames decoded when decoding from the start up to the last wanted frame."""
    return max(wanted) + 1


def seek_cost(index: FrameIndex, wanted: list[int]) -> int:
    """Frames decoded (plus seek overheads) when seeking to each kept frame's keyframe when it helps."""
    cost, next_frame = 0, 0  # next_frame: what the decoder would output next without seeking
    for target in sorted(wanted):
        key = index.keyframe_before(target)
        if key > next_frame:
            cost += SEEK_OVERHEAD_FRAMES + target - key + 1
        else:
            cost += target - next_frame + 1
        next_frame = target + 1
    return cost


def plan_strategy(index: FrameIndex | None, wanted: list[int]) -> str:
    """"seek" when it decodes clearly fewer frames than decoding everything, else "all"."""
    if index is None or not wanted:
        return "all"
    return "seek" if seek_cost(index, wanted) <= SEEK_GAIN * decode_all_cost(wanted) else "all"
