"""The permit sources the ordering suite runs against: this process's own permits, or Redis's.

`sources_of(kind)` gives them; `Sources.make(limits, **options)` builds a manager; `Sources.let_pass(seconds)` lets
time pass for the order (the starvation boost): a fake clock's step for the local source, a real wait for Redis,
whose scripts read Redis's clock. The Redis one runs when `REDIS_URL` is set (skipped, saying why, without it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from concurrency.cluster import RedisPermits
from concurrency.manager import LLMConcurrencyManager, LLMPermit
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.fake_clock import FakeClock
from tests.waiting import until

# Far above every wait under test: a permit that never comes fails its test instead of hanging the suite.
BOUND_S = 5.0


@dataclass
class Sources:
    kind: str
    make: Callable[..., LLMConcurrencyManager]
    let_pass: Callable[[float], Awaitable[None]]


async def sources_of(kind: str) -> AsyncIterator[Sources]:
    """The sources of one kind ("local" or "redis"); the Redis managers are closed and their keys deleted after."""
    if kind == "local":
        clock = FakeClock()

        def make_local(limits: dict[str, int] | None = None, **options: Any) -> LLMConcurrencyManager:
            return LLMConcurrencyManager(limits or {"b": 1}, clock=clock, **options)

        async def step(seconds: float) -> None:
            clock.advance(seconds)

        yield Sources("local", make_local, step)
        return
    url = suite_redis_url("the ordering suite's Redis permits")
    made: list[LLMConcurrencyManager] = []
    with fresh_prefix(url, "permit-order") as prefix:

        def make_redis(limits: dict[str, int] | None = None, **options: Any) -> LLMConcurrencyManager:
            source = RedisPermits(redis_url=url, prefix=prefix, worker_id="W")
            m = LLMConcurrencyManager(limits or {"b": 1}, source=source, **options)
            made.append(m)
            return m

        try:
            yield Sources("redis", make_redis, asyncio.sleep)
        finally:
            for m in made:
                await m.aclose()


def waiting(m: LLMConcurrencyManager, backend: str = "b") -> int:
    return m.stats()["backends"][backend]["waiting"]


async def queued(m: LLMConcurrencyManager, task: asyncio.Task[Any], before: int, backend: str = "b") -> None:
    """Return once the task's acquire is queued (``waiting`` grew past ``before``), so the queue is in call order."""
    await until(lambda: waiting(m, backend) > before or task.done(), within=BOUND_S)
    assert not task.done(), task


async def hold(m: LLMConcurrencyManager, backend: str = "b") -> LLMPermit:
    """A permit taken (waiting for it within BOUND_S) and kept until `release`."""
    permit = m.acquire(backend)
    await asyncio.wait_for(permit.__aenter__(), BOUND_S)
    return permit


async def release(permit: LLMPermit) -> None:
    await permit.__aexit__(None, None, None)
