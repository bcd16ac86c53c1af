"""stats(), the wait window, retry_after estimates, the process singleton, loop binding and import purity."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from concurrency import manager as manager_module
from concurrency.context import request_scope
from concurrency.errors import BusyError
from concurrency.manager import DEFAULT_LIMITS, LLMConcurrencyManager, get_manager
from concurrency.stats import WaitWindow, percentile
from tests.concurrency.manager_helpers import hold, release, settle
from tests.fake_clock import FakeClock


@pytest.fixture
def fresh_singleton() -> Iterator[None]:
    manager_module.reset_manager()
    yield
    manager_module.reset_manager()


async def test_wait_percentiles_match_known_waits() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1}, clock=clock)
    holder = await hold(m)  # wait 0

    async def waiter() -> None:
        async with m.acquire("b"):
            clock.advance(0.001)  # each holder keeps the permit 1 ms of fake time

    tasks = [asyncio.create_task(waiter()) for _ in range(100)]
    await settle()
    await release(holder)
    await asyncio.gather(*tasks)
    # Waits: 0 (holder), then 0, 1, ..., 99 ms for the 100 queued waiters: 101 samples.
    s = m.stats()["backends"]["b"]
    assert s["wait_samples"] == 101
    assert s["wait_ms_p50"] == pytest.approx(49.0, abs=1e-6)
    assert s["wait_ms_p95"] == pytest.approx(94.0, abs=1e-6)
    assert s["wait_ms_p99"] == pytest.approx(98.0, abs=1e-6)
    assert s["max_wait_ms"] == pytest.approx(99.0, abs=1e-6)
    assert s["wait_ms_p50"] <= s["wait_ms_p95"] <= s["wait_ms_p99"] <= s["max_wait_ms"]


async def test_stats_report_counts_and_queue_head_in_service_order() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1, "chat": 2}, priority_enabled=True, starvation_threshold=5.0, clock=clock)
    holder = await hold(m)
    tasks = []
    for name, done in (("r-a", 0), ("r-b", 2)):

        async def run(name: str = name, done: int = done) -> None:
            with request_scope(name) as ctx:
                ctx.completed_calls = done
                async with m.acquire("b"):
                    pass

        tasks.append(asyncio.create_task(run()))
        await settle()
    clock.advance(0.25)
    s = m.stats()
    assert (s["mode"], s["starvation_threshold"], s["acquire_timeout"], s["max_waiters"]) == (
        "priority",
        5.0,
        30.0,
        200,
    )
    assert s["live_requests"] >= 2
    b = s["backends"]["b"]
    assert (b["limit"], b["available"], b["in_progress"], b["waiting"], b["total_acquired"]) == (1, 0, 1, 2, 1)
    assert b["queue_head"] == [
        {"request_id": "r-b", "priority": -3, "waited_ms": 250.0, "boosted": False},
        {"request_id": "r-a", "priority": -1, "waited_ms": 250.0, "boosted": False},
    ]
    assert m.stats(queue_head=1)["backends"]["b"]["queue_head"][0]["request_id"] == "r-b"
    assert s["backends"]["chat"]["available"] == 2
    await release(holder)
    await asyncio.gather(*tasks)
    b = m.stats()["backends"]["b"]
    assert (b["total_acquired"], b["total_released"], b["waiting"]) == (3, 3, 0)


def test_wait_window_is_bounded_by_count_and_age() -> None:
    window = WaitWindow(maxlen=1000, horizon=60.0)
    for i in range(1500):
        window.record(100.0, i / 1000.0)
    summary = window.summary(100.0)
    assert summary["samples"] == 1000
    assert summary["max"] == pytest.approx(1.499)
    assert summary["p50"] == pytest.approx(0.999)  # only the newest 1000 (0.5 s .. 1.499 s) remain
    window.record(130.0, 0.002)
    assert window.summary(161.0)["samples"] == 1  # the t=100 samples are older than 60 s
    assert window.summary(200.0) == {"samples": 0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]
    assert [percentile(values, p) for p in (0, 10, 50, 90, 95, 100)] == [1.0, 1.0, 5.0, 9.0, 10.0, 10.0]
    assert percentile([], 50) == 0.0


async def test_retry_after_is_estimated_from_recent_waits() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1}, max_waiters=1, clock=clock)
    holder = await hold(m)
    waiter = asyncio.create_task(hold(m))
    await settle()
    clock.advance(3.2)
    await release(holder)  # the waiter got its permit after 3.2 s
    second = await waiter
    assert second.waited_s == pytest.approx(3.2)
    with pytest.raises(BusyError) as info:
        async with m.acquire("b", timeout=0):
            pass
    assert info.value.retry_after == 4.0  # p90 of recent waits (0, 3.2), rounded up
    await release(second)


async def test_retry_after_is_the_work_queued_ahead_waiters_times_call_time_over_limit() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 2}, max_waiters=4, acquire_timeout=60.0, clock=clock)
    first, second = await hold(m), await hold(m)
    clock.advance(2.5)
    await release(first)
    await release(second)  # recent calls held their permit 2.5 s
    holders = [await hold(m), await hold(m)]
    waiters = [asyncio.create_task(hold(m)) for _ in range(4)]
    await settle()
    clock.advance(1.0)  # past the estimate's cache
    with pytest.raises(BusyError) as info:
        async with m.acquire("b"):
            pass
    assert info.value.reason == "rejected"
    assert info.value.retry_after == 7.0  # (4 waiters + this caller) x 2.5 s / 2 permits = 6.25 s, rounded up
    for permit in holders:
        await release(permit)
    for task in waiters:  # in arrival order: each gets a permit once one ahead of it is released
        await release(await task)


async def test_retry_after_is_at_least_one_second() -> None:
    m = LLMConcurrencyManager({"b": 1}, max_waiters=0)
    async with m.acquire("b"):
        with pytest.raises(BusyError) as info:
            async with m.acquire("b"):
                pass
    assert info.value.reason == "rejected"
    assert info.value.retry_after == 1.0


async def test_get_manager_builds_the_singleton_from_caller_arguments(fresh_singleton: None) -> None:
    m = get_manager({"chat": 3}, priority_enabled=True, acquire_timeout=5.0)
    assert get_manager() is m
    assert (m.backends, m.limit("chat"), m.mode, m.acquire_timeout) == (("chat",), 3, "priority", 5.0)
    get_manager({"chat": 4}, max_waiters=7)  # later arguments are applied to the same manager
    assert (m.limit("chat"), m.max_waiters, m.mode) == (4, 7, "priority")


async def test_get_manager_defaults_and_set_reset(fresh_singleton: None) -> None:
    default = get_manager()
    assert set(default.backends) == set(DEFAULT_LIMITS) == {"default", "chat", "responses", "embedding"}
    custom = LLMConcurrencyManager({"b": 1})
    manager_module.set_manager(custom)
    assert get_manager() is custom
    manager_module.reset_manager()
    assert get_manager() is not custom


def test_manager_is_reusable_on_a_new_loop_once_the_old_one_closed_with_permits_out() -> None:
    m = LLMConcurrencyManager({"b": 1})

    async def leak() -> None:
        await hold(m)  # never released: the loop goes away underneath it

    async def reuse() -> None:
        async with m.acquire("b", timeout=0):
            pass

    asyncio.run(leak())
    asyncio.run(reuse())
    assert m.stats()["backends"]["b"]["in_progress"] == 0


def test_manager_refuses_a_second_live_loop_while_in_use() -> None:
    m = LLMConcurrencyManager({"b": 1})
    first = asyncio.new_event_loop()
    try:
        permit = first.run_until_complete(hold(m))

        async def other() -> None:
            async with m.acquire("b"):
                pass

        with pytest.raises(RuntimeError, match="another event loop"):
            asyncio.run(other())
        first.run_until_complete(release(permit))
    finally:
        first.close()


def test_concurrency_modules_import_nothing_from_django_chat_or_rag() -> None:
    code = (
        "import sys\n"
        "import concurrency.manager, concurrency.context, concurrency.errors, concurrency.stats\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'channels', 'chatbot', 'rag'})\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
