"""Await a Redis call, then honour a pending cancellation: the one guard every Redis loop of the project uses.

On Python 3.11 redis.asyncio reads under `asyncio.timeout`, which can turn a cancellation arriving with the read
into an ordinary return (None, an empty pop) or into one of its own errors (a `TimeoutError`, a
`ConnectionError`). A loop around such a call, or a caller that treats the error as "Redis is down", would then
carry on as if nobody had asked it to stop: a consumer whose client left kept popping forever, a cancelled
request fell back to its local path. `redis_call` awaits the call and, whether it returned or raised, raises
`CancelledError` if the task is being cancelled, so the cancellation is never lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["redis_call", "stop_if_cancelled"]

T = TypeVar("T")


def stop_if_cancelled() -> None:
    """Raise CancelledError if the current task was asked to stop (`Task.cancelling()`), else nothing."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def redis_call(call: Awaitable[T], *, timeout: float | None = None) -> T:  # noqa: ASYNC109 (a bound, passed on)
    """The result of `call` (bounded by `timeout` seconds when given: `TimeoutError` past it), unless the task was
    cancelled meanwhile: then `CancelledError`, even if redis.asyncio swallowed it into a return or an error."""
    try:
        if timeout is None:
            result = await call
        else:
            async with asyncio.timeout(timeout):
                result = await call
    except Exception:
        stop_if_cancelled()
        raise
    stop_if_cancelled()
    return result
