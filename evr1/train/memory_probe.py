"""Peak bytes the CPU allocator holds while a function runs, from torch.profiler's allocation events.

Why this and not RSS: RSS includes the Python heap, libraries and pages the allocator keeps after a
free, so it moves by megabytes from run to run; the profiler records every allocation and free of
torch's allocator with its size, so replaying them in time order gives the peak of live tensor bytes
exactly, and the same for the same computation (run it on one thread). Used to check `evr1.train.plan`'s
formulas (tests/train/test_plan.py) and by benchmarks/bench_long_video.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


def _allocations(node: Any, out: list[tuple[int, int]]) -> None:
    if node.tag == _EventType.Allocation:
        out.append((node.start_time_ns, node.extra_fields.alloc_size))
    for child in node.children:
        _allocations(child, out)


def peak_allocated_bytes(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(peak bytes allocated by torch above the level at the call, fn's result) for `fn()` on the CPU."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events: list[tuple[int, int]] = []
    for root in prof.profiler.kineto_results.experimental_event_tree():
        _allocations(root, events)
    events.sort(key=lambda e: e[0])
    live = peak = 0
    for _, size in events:
        live += size
        peak = max(peak, live)
    return peak, result
