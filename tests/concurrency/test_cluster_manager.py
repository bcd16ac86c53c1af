"""Cluster-wide LLM permits in the real Redis: two managers stand for two workers sharing one limit. The order one
worker's waiters are served in is the ordering suite's (test_permit_ordering.py); here, what takes more than one
worker or Redis itself: order across workers, leases of a dead worker, the console's view, outages."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis

from concurrency.cluster import FallbackPermits, RedisPermits, cluster_manager
from concurrency.context import request_scope
from concurrency.errors import BusyError
from concurrency.manager import LLMConcurrencyManager
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.concurrency.manager_helpers import hold
from tests.servers import PrivateRedis
from tests.waiting import until

Managers = Callable[..., LLMConcurrencyManager]


@pytest.fixture
async def managers() -> AsyncIterator[Managers]:
    url = suite_redis_url()
    made: list[LLMConcurrencyManager] = []
    with fresh_prefix(url, "cluster-test") as prefix:

        def make(
            worker: str, limits: dict[str, int] | None = None, *, permits: dict[str, Any] | None = None, **options: Any
        ) -> LLMConcurrencyManager:
            """A manager (`options` are its own) on `RedisPermits` (`permits`: theirs: leases, refreshes)."""
            options.setdefault("acquire_timeout", 10.0)
            redis_permits = RedisPermits(redis_url=url, prefix=prefix, worker_id=worker, **(permits or {}))
            m = cluster_manager(limits or {"b": 1}, redis_permits, **options)
            made.append(m)
            return m

        yield make
        for m in made:
            await m.aclose()


def queued(m: LLMConcurrencyManager) -> int:
    """This worker's waiters Redis has queued."""
    return m.stats()["backends"]["b"]["waiting"]


def fallback(m: LLMConcurrencyManager) -> FallbackPermits:
    assert isinstance(m.source, FallbackPermits)
    return m.source


async def enqueue(
    m: LLMConcurrencyManager, order: list[str], name: str, *, completed: int = 0
) -> Callable[[], asyncio.Task[None]]:
    """Start a waiter and return once Redis has queued it, so the enqueue order is the call order."""
    before = queued(m)

    async def run() -> None:
        with request_scope(name) as ctx:
            ctx.completed_calls = completed
            async with m.acquire("b"):
                order.append(name)

    task = asyncio.create_task(run())
    await until(lambda: queued(m) > before or task.done())
    return lambda: task


async def test_two_workers_never_exceed_the_limit_together_and_reach_it(managers: Managers) -> None:
    a, b = managers("A", {"b": 3}), managers("B", {"b": 3})
    running = peak = 0

    async def call(m: LLMConcurrencyManager) -> None:
        nonlocal running, peak
        async with m.acquire("b"):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1

    await asyncio.gather(*(call(a if i % 2 else b) for i in range(24)))
    assert peak == 3
    stats = a.stats()["backends"]["b"]
    assert stats["limit"] == 3 and stats["in_progress"] == 0
    assert stats["total_acquired"] == stats["total_released"] == 12


async def test_fifo_order_holds_across_workers(managers: Managers) -> None:
    a, b = managers("A"), managers("B")
    holder = await hold(a)
    order: list[str] = []
    names = [f"w{i}" for i in range(8)]
    tasks = [await enqueue(a if i % 2 else b, order, name) for i, name in enumerate(names)]
    await holder.__aexit__(None, None, None)
    await asyncio.gather(*(t() for t in tasks))
    assert order == names


async def test_priority_and_starvation_boost_hold_across_workers(managers: Managers) -> None:
    a = managers("A", priority_enabled=True, starvation_threshold=1.0)
    b = managers("B", priority_enabled=True, starvation_threshold=1.0)
    holder = await hold(a)
    order: list[str] = []
    # "old" waits past the threshold; the rest arrive later with more progress, so priority alone would serve them
    # first (most completed calls first), but the boost serves the starved one before them.
    waiting = [await enqueue(b, order, "old", completed=0)]
    # A fixed sleep, kept: waiting past the threshold (wall time, on Redis's clock) is what is tested.
    await asyncio.sleep(1.1)
    waiting.append(await enqueue(a, order, "one", completed=1))
    waiting.append(await enqueue(b, order, "three", completed=3))
    waiting.append(await enqueue(a, order, "two", completed=2))
    await holder.__aexit__(None, None, None)
    await asyncio.gather(*(t() for t in waiting))
    assert order == ["old", "three", "two", "one"]


async def test_a_dead_workers_permit_comes_back_when_its_lease_runs_out(managers: Managers) -> None:
    dead = managers("dead", permits={"lease_seconds": 2.5, "refresh_interval": 1.0})
    alive = managers("alive", permits={"lease_seconds": 2.5, "refresh_interval": 1.0})
    await hold(dead)
    await dead.aclose()  # the worker stops renewing its lease, as a killed process does, and never gives it back
    started = time.monotonic()
    async with alive.acquire("b", timeout=8.0):
        waited = time.monotonic() - started
    assert waited < 8.0  # bounded by the lease (2.5 s) plus a refresh of the waiting worker


async def test_the_console_sees_the_cluster_and_each_worker(managers: Managers) -> None:
    a, b = managers("A", {"b": 4}), managers("B", {"b": 4})
    held = [await hold(a), await hold(a), await hold(b)]
    # until a lease refresh brought the cluster's view (every second)
    await until(lambda: b.stats()["cluster"]["backends"]["b"]["by_worker"] == {"A": 2, "B": 1})
    cluster = b.stats()["cluster"]
    assert cluster["state"] == "redis"
    assert cluster["backends"]["b"]["in_progress"] == 3
    assert cluster["backends"]["b"]["by_worker"] == {"A": 2, "B": 1}
    assert b.stats()["backends"]["b"]["in_progress"] == 1
    for permit in held:
        await permit.__aexit__(None, None, None)


async def test_a_redis_outage_falls_back_to_a_share_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    own = PrivateRedis()
    own.start()
    redis_permits = RedisPermits(
        redis_url=own.url, prefix="outage", worker_id="me", workers_index_key="outage:workers",
        refresh_interval=0.5, lease_seconds=2.5, op_timeout=0.5,
    )  # fmt: skip
    m = cluster_manager({"b": 4}, redis_permits, acquire_timeout=5.0)
    permits = fallback(m)
    try:
        presence = redis.Redis.from_url(own.url)
        presence.zadd("outage:workers", {"me": time.time(), "other": time.time()})  # two live workers
        first = await hold(m)
        await until(lambda: permits.live_workers == 2)
        own.stop()
        with caplog.at_level(logging.WARNING, logger="concurrency.cluster.fallback"):
            second = await hold(m)  # Redis is down: the local share (4 / 2 = 2) counts the permit already out
            assert permits.state == "degraded"
            with pytest.raises(BusyError):
                async with m.acquire("b", timeout=0.2):
                    pass
        assert "Redis unreachable" in caplog.text
        own.start()
        await until(lambda: permits.state == "redis", within=10.0)
        client = redis.Redis.from_url(own.url)
        # both permits still running are counted in Redis again, so the cluster's limit sees them
        await until(lambda: client.zcard("outage:llm:b:holders") == 2, within=5.0)
        third = await hold(m)
        for permit in (first, second, third):
            await permit.__aexit__(None, None, None)
        await until(lambda: client.zcard("outage:llm:b:holders") == 0)
        client.close()
        presence.close()
    finally:
        await m.aclose()
        own.stop()


async def test_no_waiting_room_still_takes_a_free_permit_and_refuses_at_once_when_none_is(managers: Managers) -> None:
    a, b = managers("A", max_waiters=0), managers("B", max_waiters=0)
    holder = await hold(a)  # the only permit, taken although nobody may wait
    with pytest.raises(BusyError) as raised:
        async with b.acquire("b"):
            pass
    assert raised.value.reason == "rejected"
    with pytest.raises(BusyError) as raised:
        async with managers("C").acquire("b", timeout=0):
            pass
    assert raised.value.reason == "timeout"
    assert b.stats()["cluster"]["backends"]["b"]["waiting"] == 0
    await holder.__aexit__(None, None, None)


async def enqueue_low(m: LLMConcurrencyManager, order: list[str], name: str) -> Callable[[], asyncio.Task[None]]:
    """A low-priority waiter (a conversation summary's call), queued in Redis before this returns."""
    before = queued(m)

    async def run() -> None:
        async with m.acquire("b", low_priority=True):
            order.append(name)

    task = asyncio.create_task(run())
    await until(lambda: queued(m) > before or task.done())
    return lambda: task


@pytest.mark.parametrize("priority", [False, True])
async def test_a_low_priority_waiter_goes_after_every_requests_call_across_workers(
    managers: Managers, priority: bool
) -> None:
    # A zero starvation threshold boosts every request's waiter at once: the low-priority one is still last.
    a = managers("A", priority_enabled=priority, starvation_threshold=0.0)
    b = managers("B", priority_enabled=priority, starvation_threshold=0.0)
    holder = await hold(a)
    order: list[str] = []
    waiting = [await enqueue_low(b, order, "summary")]
    waiting.append(await enqueue(a, order, "answer-1"))
    waiting.append(await enqueue(b, order, "answer-2", completed=2))
    head = b.stats(queue_head=5)["backends"]["b"]["queue_head"]
    assert [e["request_id"] for e in head] == ["answer-2", None]  # this worker's own, the summary's last
    await holder.__aexit__(None, None, None)
    await asyncio.gather(*(t() for t in waiting))
    assert order[-1] == "summary" and sorted(order[:2]) == ["answer-1", "answer-2"]
