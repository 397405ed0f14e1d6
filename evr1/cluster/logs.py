"""Ray worker log lines into a Python logger (the Prefect tasks pass the flow run's logger).

Ray sends every worker's stdout/stderr lines to the driver, which prints them to its own streams; an
orchestrator that records `logging` records (Prefect) never sees them. `forwarded(logger)` adds a
handler to Ray's driver-side stream dispatcher (the hook Ray's own printer uses) for the duration of
a block: each line becomes a record on `logger` at the level the line itself names (warnings and
errors always; other lines at `min_level` INFO when asked).
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator

# The first pattern a line matches gives its level (Python logging and glog prefixes, tracebacks).
LEVELS: list[tuple[re.Pattern, int]] = [
    (re.compile(r"\b(CRITICAL|FATAL)\b|^F\d{4}"), logging.CRITICAL),
    (re.compile(r"\bERROR\b|Traceback \(most recent call last\)|^E\d{4}|\w+Error: "), logging.ERROR),
    (re.compile(r"\bWARN(ING)?\b|Warning: |^W\d{4}"), logging.WARNING),
]


def level_of(line: str) -> int:
    for pattern, level in LEVELS:
        if pattern.search(line):
            return level
    return logging.INFO


def _source(data: dict) -> str:
    who = data.get("actor_name") or data.get("task_name") or "worker"
    return f"({who} pid={data.get('pid')}, ip={data.get('ip')})"


@contextlib.contextmanager
def forwarded(logger: logging.Logger | logging.LoggerAdapter, min_level: int = logging.WARNING) -> Iterator[None]:
    """Within the block, Ray worker lines at `min_level` or above are logged on `logger`."""
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:  # a Ray without the hook: lines still reach the driver's stderr
        yield
        return
    name = f"evr1-forward-{uuid.uuid4().hex[:8]}"

    def handle(data: dict) -> None:
        if data.get("pid") in ("autoscaler", "raylet"):
            return
        for line in data.get("lines", []):
            level = level_of(line)
            if level >= min_level:
                with contextlib.suppress(Exception):
                    logger.log(level, "%s %s", _source(data), line)

    dispatcher.add_handler(name, handle)
    try:
        yield
    finally:
        dispatcher.remove_handler(name)
