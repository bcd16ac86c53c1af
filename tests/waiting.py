"""Waiting on a condition in async tests: poll it on the loop, fail after a bound (never a fixed sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    """Wait for ``check()`` (polled on the loop); fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.01)
