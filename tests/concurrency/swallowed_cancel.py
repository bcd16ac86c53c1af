"""What redis.asyncio can do to a cancellation on Python 3.11, done on purpose, and the check that a task stops.

redis.asyncio reads under `asyncio.timeout`, which can turn a cancellation landing with the read into a plain
return or into one of its errors. That race cannot be provoked on demand, so `swallowing` does it to a real
Redis call. `expect_cancelled` fails (instead of hanging) when the task goes on after its cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

# Generous: a task that honours its cancellation ends at once; one that does not never ends.
ENDS_WITHIN = 10.0


async def swallowing(call: Awaitable[Any], started: asyncio.Event, *, raises: bool = False) -> Any:
    """Await `call` as redis.asyncio can: a cancellation arriving meanwhile becomes a return (None) or an error."""
    started.set()
    try:
        return await call
    except asyncio.CancelledError:
        if raises:
            raise RedisConnectionError("connection closed while reading") from None
        return None


async def expect_cancelled(
    task: asyncio.Task[Any], started: asyncio.Event, give_up: Callable[[], Awaitable[None] | None]
) -> None:
    """Cancel `task` once its Redis call started; it must end cancelled. One that goes on is made to end by
    `give_up` (a task swallowing its cancellations cannot be stopped otherwise) and the test fails."""
    await asyncio.wait_for(started.wait(), ENDS_WITHIN)
    task.cancel()
    await asyncio.wait({task}, timeout=ENDS_WITHIN)
    if not task.done():
        ended = give_up()
        if ended is not None:
            await ended
        await asyncio.wait({task}, timeout=ENDS_WITHIN)
        pytest.fail("the task went on after it was cancelled")
    assert task.cancelled()
