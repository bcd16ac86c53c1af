"""The requests-per-minute window: never more than the limit in any window, waiting bounded by the deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.errors import Busy
from rag.llm.ratelimit import RateLimited, SlidingWindowRPM
from rag.wiring import build_llm_backend
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory, VirtualTime


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def assert_window_respected(starts: list[float], limit: int, window: float, slack: float = 0.0) -> None:
    starts = sorted(starts)
    for i in range(len(starts) - limit):
        # start i and start i + limit can never share a window
        assert starts[i + limit] - starts[i] >= window - slack, (i, starts)


async def test_fake_clock_sequence_never_exceeds_the_limit() -> None:
    fake = FakeTime()
    limiter = SlidingWindowRPM(lambda _: 5, window=60.0, clock=fake.clock, sleep=fake.sleep)
    starts = []
    for _ in range(17):
        await limiter.wait("chat", max_wait=3600)
        starts.append(fake.now)
        fake.now += 7.0  # callers keep coming every 7 s
    assert_window_respected(starts, 5, 60.0)
    assert fake.sleeps  # the 6th caller had to wait
    assert fake.sleeps[0] == pytest.approx(60.0 - 5 * 7.0)


async def test_a_wait_longer_than_allowed_fails_at_once_and_takes_no_spot() -> None:
    fake = FakeTime()
    limiter = SlidingWindowRPM(lambda _: 2, window=60.0, clock=fake.clock, sleep=fake.sleep)
    await limiter.wait("chat", 0)
    await limiter.wait("chat", 0)
    with pytest.raises(RateLimited) as info:
        await limiter.wait("chat", max_wait=10)
    assert info.value.retry_after == pytest.approx(60.0)
    assert fake.sleeps == []
    fake.now += 60.0
    assert await limiter.wait("chat", 0) == 0.0  # the refused call did not book a spot
    # Backends have separate windows, and 0 means unlimited.
    assert await SlidingWindowRPM(lambda _: 0).wait("chat", 0) == 0.0


async def test_concurrent_callers_book_starts_that_keep_the_window() -> None:
    # Twelve callers arrive at once; each books its start before it sleeps, so the starts are known without
    # waiting for them: the clock stands still and the sleep only lets the other callers in.
    now = 0.0  # with a window of 0.25 s every start is exact in binary floating point
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    limiter = SlidingWindowRPM(lambda _: 5, window=0.25, clock=lambda: now, sleep=sleep)
    starts: list[float] = []

    async def call() -> None:
        starts.append(now + await limiter.wait("chat", max_wait=5))

    await asyncio.gather(*(call() for _ in range(12)))
    assert_window_respected(starts, 5, 0.25)
    # three windows' worth of starts: five at once, five a window later, two after that
    assert sorted(starts) == [0.0] * 5 + [0.25] * 5 + [0.5] * 2
    assert sorted(slept) == [0.25] * 5 + [0.5] * 2


async def test_cancelled_waiter_gives_its_spot_back() -> None:
    fake = FakeTime()
    never = asyncio.Event()

    async def blocking_sleep(seconds: float) -> None:
        await never.wait()

    limiter = SlidingWindowRPM(lambda _: 1, window=60.0, clock=fake.clock, sleep=blocking_sleep)

    async def next_start() -> float:
        with pytest.raises(RateLimited) as info:
            await limiter.wait("chat", max_wait=0)  # refused at once: says when, books nothing
        return info.value.retry_after

    await limiter.wait("chat", 0)
    waiter = asyncio.create_task(limiter.wait("chat", max_wait=100))
    await asyncio.sleep(0)
    assert await next_start() == pytest.approx(120.0)  # the waiter booked the spot at +60
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await next_start() == pytest.approx(60.0)


async def test_policy_waits_for_the_window_and_busy_past_the_deadline(
    make_backend: BackendFactory, sim: SimulatorProcess, virtual_time: VirtualTime
) -> None:
    backend = make_backend(time=virtual_time, rpm={"chat": 2}, rpm_window=0.5, total_timeout=5.0)
    started = virtual_time.clock()
    for _ in range(3):
        await backend.complete(backend="chat", node="n", messages=USER)
    # The third call, and only it, waited for the window: until half a second after the first call's start.
    assert len(virtual_time.sleeps) == 1 and 0 < virtual_time.sleeps[0] <= 0.5
    assert virtual_time.clock() - started >= 0.5

    slow_window = make_backend(time=virtual_time, rpm={"chat": 1}, rpm_window=30.0, total_timeout=2.0)
    await slow_window.complete(backend="chat", node="n", messages=USER)
    with pytest.raises(Busy) as info:
        await slow_window.complete(backend="chat", node="n", messages=USER)
    assert info.value.retry_after == pytest.approx(30.0, abs=1.0)
    assert len(virtual_time.sleeps) == 1  # refused at once, without waiting
    assert (await sim.astats())["endpoints"]["chat"]["attempts"] == 4


async def test_retries_count_against_the_window(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog, virtual_time: VirtualTime
) -> None:
    backend = make_backend(time=virtual_time, rpm={"chat": 2}, rpm_window=1.0, total_timeout=5.0)
    started = virtual_time.clock()
    await backend.complete(backend="chat", node="n", messages=USER)
    await sim.afaults(fail_next=["500"])
    # The failed attempt takes the window's second spot, so its retry (backoff 10 ms) must wait for the first
    # spot to leave the window: upstream counts retries as requests too.
    result = await backend.complete(backend="chat", node="n", messages=USER)
    assert result.text
    # The 10 ms backoff, then the wait for the window: the retry started a full window after the first call.
    assert len(virtual_time.sleeps) == 2 and virtual_time.sleeps[0] == 0.01
    assert virtual_time.clock() - started >= 1.0
    assert attempts.outcomes == ["ok", "status", "ok"]
    assert (await sim.astats())["endpoints"]["chat"]["attempts"] == 3


async def test_llm_rpm_limit_holds_for_two_workers_sharing_redis(
    settings: Any, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    url = suite_redis_url("a cluster-wide LLM_RPM_LIMIT")
    with fresh_prefix(url, "llm-rpm") as prefix:
        settings.REDIS_URL, settings.REDIS_PREFIX, settings.LLM_CLUSTER_LIMITS = url, prefix, True
        settings.LLM_BASE_URL, settings.LLM_API_KEY, settings.LLM_RPM_LIMIT = sim.base_url, "test", 2
        # two workers' backends, built as each worker builds its own: a policy and a Redis client each
        workers = [backend for backend in (build_llm_backend(), build_llm_backend()) if backend is not None]
        assert len(workers) == 2
        await workers[0].complete(backend="chat", node="n", messages=USER)
        await workers[1].complete(backend="chat", node="n", messages=USER)
        # The cluster's two a minute are used: the third call, on either worker, is refused before it is sent
        # (its spot is a minute away, past the manager's 5 s wait bound).
        for worker in workers:
            with pytest.raises(Busy) as info:
                await worker.complete(backend="chat", node="n", messages=USER)
            assert 50 < (info.value.retry_after or 0) <= 60
        assert (await sim.astats())["endpoints"]["chat"]["attempts"] == 2
