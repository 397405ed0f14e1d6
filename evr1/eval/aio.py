"""`asyncio.run` that also works when the calling thread already runs an event loop.

A Prefect flow can be executed from inside a loop (`prefect flow-run retry` runs the flow from its
async command); the eval runner's `asyncio.run` would then refuse. Here the coroutine gets its own
loop in a helper thread instead, and its result or exception comes back unchanged.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="evr1-aio", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
