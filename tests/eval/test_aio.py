"""`evr1.eval.aio.run` runs a coroutine from plain code and from inside a running event loop alike."""

import asyncio

import pytest

from evr1.eval import aio


async def _double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


async def _fail() -> None:
    raise ValueError("inner")


def test_runs_outside_and_inside_a_running_loop():
    assert aio.run(_double(2)) == 4

    async def caller() -> int:  # e.g. `prefect flow-run retry`, which runs the flow from its own loop
        return aio.run(_double(3))

    assert asyncio.run(caller()) == 6


def test_the_coroutines_error_reaches_the_caller():
    async def caller() -> None:
        aio.run(_fail())

    with pytest.raises(ValueError, match="inner"):
        asyncio.run(caller())
