"""Waiting on a condition in async tests: poll it on the loop, fail after a bound (never a fixed sleep).

`until(check)` for a condition read in place; `until_async(read, accept)` when reading it has to be awaited (a
Redis call, a blocking read sent to a thread with `asyncio.to_thread`), and for the value it settles on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

INTERVAL = 0.01


async def until_async(
    read: Callable[[], Awaitable[T]], accept: Callable[[T], Any] = bool, within: float = 5.0, interval: float = INTERVAL
) -> T:
    """Poll ``await read()`` until ``accept`` takes its value (truthy by default) and return that value; fail after
    ``within`` seconds, naming the last value read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await read()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within} s (last value: {value!r})")
        await asyncio.sleep(interval)


async def until(check: Callable[[], Any], within: float = 5.0, interval: float = INTERVAL) -> float:
    """Wait for ``check()`` (polled on the loop) to be truthy; the seconds it took. Fails after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def read() -> Any:
        return check()

    await until_async(read, within=within, interval=interval)
    return loop.time() - started
