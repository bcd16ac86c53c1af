"""Checks of arguments and settings, the local permits' deadline timers and resizing under load, and the helpers
around acquire(). Bounded waiting and limits for every source are the ordering suite's (test_permit_ordering.py)."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from concurrency.context import current_request_context, request_scope
from concurrency.errors import BusyError
from concurrency.manager import LLMConcurrencyManager, LLMPermit, with_llm_semaphore
from tests.concurrency.manager_helpers import hold, release, settle

# Far above every timeout under test: a deadline that never fires fails its test instead of hanging the suite.
BOUND_S = 2.0


def backend_stats(m: LLMConcurrencyManager, backend: str = "b") -> dict[str, object]:
    return dict(m.stats()["backends"][backend])


async def busy_from(m: LLMConcurrencyManager, max_wait: float | None = None, backend: str = "b") -> BusyError:
    """The BusyError of one acquire (``max_wait`` is its acquire timeout) that must be refused, within BOUND_S."""

    async def enter() -> None:
        async with m.acquire(backend, max_wait):
            pytest.fail("must not get a permit")

    with pytest.raises(BusyError) as info:
        await asyncio.wait_for(enter(), BOUND_S)
    return info.value


async def test_unknown_backend_raises_value_error_naming_it() -> None:
    m = LLMConcurrencyManager({"chat": 1, "embedding": 1})
    with pytest.raises(ValueError, match=r"'chta'.*chat, embedding"):
        m.acquire("chta")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_invalid_limit_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="limit"):
        LLMConcurrencyManager({"b": bad})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0])
def test_unbounded_or_negative_timeouts_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="acquire_timeout"):
        LLMConcurrencyManager({"b": 1}, acquire_timeout=bad)
    m = LLMConcurrencyManager({"b": 1})
    with pytest.raises(ValueError, match="timeout"):
        m.acquire("b", timeout=bad)


def test_configure_validates_everything_before_changing_anything() -> None:
    m = LLMConcurrencyManager({"b": 2}, acquire_timeout=30.0)
    with pytest.raises(ValueError):
        m.configure(acquire_timeout=5.0, priority_enabled=True, limits={"b": 4, "c": 0})
    assert (m.acquire_timeout, m.mode, m.limit("b"), m.backends) == (30.0, "fifo", 2, ("b",))


def test_configure_applies_a_whole_settings_object() -> None:
    m = LLMConcurrencyManager({"b": 2})
    m.configure(
        priority_enabled=True,
        starvation_threshold=3.0,
        acquire_timeout=7.0,
        max_waiters=9,
        limits={"b": 5, "embedding": 16},
    )
    s = m.stats()
    assert (s["mode"], s["starvation_threshold"], s["acquire_timeout"], s["max_waiters"]) == ("priority", 3.0, 7.0, 9)
    assert s["backends"]["b"]["limit"] == 5
    assert s["backends"]["embedding"]["limit"] == 16


async def test_per_call_timeout_overrides_the_default() -> None:
    m = LLMConcurrencyManager({"b": 1}, acquire_timeout=30.0)
    holder = await hold(m)
    err = await busy_from(m, 0.01)
    # its own 0.01 s ended the wait: the 30 s default would not have within busy_from's bound
    assert err.reason == "timeout" and err.waited >= 0.009
    await release(holder)


async def test_busy_error_pickles_with_its_fields() -> None:
    err = BusyError("chat", "rejected", 2.2, 0.0, 8, 200, 8)
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.backend, copy.reason, copy.retry_after, copy.waiting, str(copy)) == (
        "chat",
        "rejected",
        3.0,
        200,
        str(err),
    )


async def test_resize_down_under_load_never_admits_past_the_new_limit_and_converges() -> None:
    m = LLMConcurrencyManager({"b": 8})
    active = 0
    resized = False
    in_progress_at_entry_after_resize: list[int] = []

    async def worker() -> None:
        nonlocal active
        for _ in range(5):
            async with m.acquire("b"):
                active += 1
                if resized:
                    in_progress_at_entry_after_resize.append(backend_stats(m)["in_progress"])  # type: ignore[arg-type]
                    assert active <= 3
                for _ in range(3):
                    await asyncio.sleep(0)
                active -= 1

    tasks = [asyncio.create_task(worker()) for _ in range(30)]
    await settle(1)
    assert backend_stats(m)["in_progress"] == 8
    m.set_limit("b", 3)
    resized = True
    assert backend_stats(m)["available"] == 0  # not negative while 8 > 3 are still in flight
    await asyncio.gather(*tasks)
    assert in_progress_at_entry_after_resize  # work continued after the resize
    assert max(in_progress_at_entry_after_resize) <= 3
    s = backend_stats(m)
    assert (s["limit"], s["in_progress"], s["available"], s["waiting"]) == (3, 0, 3, 0)
    assert s["total_acquired"] == s["total_released"] == 150


async def test_set_limit_adds_a_new_backend() -> None:
    m = LLMConcurrencyManager({"b": 1})
    m.set_limit("responses", 2)
    async with m.acquire("responses"), m.acquire("responses", timeout=0):
        assert backend_stats(m, "responses")["in_progress"] == 2


async def test_acquire_without_request_context_works() -> None:
    m = LLMConcurrencyManager({"b": 1})
    assert current_request_context() is None
    async with m.acquire("b") as permit:
        assert permit.backend == "b"
        assert permit.waited_s == 0.0


async def test_permit_cannot_be_entered_twice_while_held() -> None:
    m = LLMConcurrencyManager({"b": 2})
    permit = m.acquire("b")
    async with permit:
        with pytest.raises(RuntimeError, match="already held"):
            await permit.__aenter__()
    assert backend_stats(m)["in_progress"] == 0


async def test_permit_cannot_be_released_twice() -> None:
    m = LLMConcurrencyManager({"b": 2})
    other = await hold(m)
    permit = await hold(m)
    await release(permit)
    with pytest.raises(RuntimeError, match="not held"):
        await release(permit)  # would otherwise free `other`'s permit
    assert backend_stats(m)["in_progress"] == 1
    await release(other)


async def test_run_and_with_llm_semaphore_hold_a_permit_around_the_call() -> None:
    from concurrency import manager as manager_module

    m = LLMConcurrencyManager({"chat": 1})
    seen: list[int] = []

    async def call(x: int, *, y: int) -> int:
        seen.append(backend_stats(m, "chat")["in_progress"])  # type: ignore[arg-type]
        return x + y

    assert await m.run("chat", call, 1, y=2) == 3
    manager_module.set_manager(m)
    try:
        with request_scope("r") as ctx:
            assert await with_llm_semaphore("chat", call, 4, y=5, timeout=1.0) == 9
            assert ctx.completed_calls == 1
    finally:
        manager_module.reset_manager()
    assert seen == [1, 1]
    assert backend_stats(m, "chat")["in_progress"] == 0


async def test_later_waiter_with_shorter_timeout_expires_first() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    patient = asyncio.create_task(hold(m))  # default 30 s timeout
    await settle()
    err = await busy_from(m, 0.02)  # the deadline timer is re-armed earlier for this one
    assert err.reason == "timeout"
    s = backend_stats(m)
    assert (s["waiting"], s["total_timeout"]) == (1, 1)
    await release(holder)
    await release(await asyncio.wait_for(patient, BOUND_S))


async def test_deadlines_fire_in_order_and_none_early() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    short = asyncio.create_task(busy_from(m, 0.02))
    await settle()
    longer = asyncio.create_task(busy_from(m, 0.05))
    first = await short  # busy_from bounds each wait
    assert backend_stats(m)["waiting"] == 1  # the 0.05 s waiter is still queued
    second = await longer
    assert first.waited >= 0.019
    assert second.waited >= 0.049
    assert backend_stats(m)["total_timeout"] == 2
    await release(holder)


async def test_deadline_of_a_granted_waiter_does_not_expire_the_next_one() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    quick = asyncio.create_task(_hold_with_timeout(m, 0.02))
    await settle()
    slow = asyncio.create_task(_hold_with_timeout(m, 5.0))
    await settle()
    await release(holder)
    quick_permit = await asyncio.wait_for(quick, BOUND_S)  # granted before its 0.02 s deadline
    # A negative check, a fixed sleep: the timer armed for `quick` fires in it and must leave `slow` alone.
    await asyncio.sleep(0.04)
    s = backend_stats(m)
    assert (s["waiting"], s["total_timeout"]) == (1, 0)
    await release(quick_permit)
    await release(await asyncio.wait_for(slow, BOUND_S))
    assert backend_stats(m)["in_progress"] == 0


async def _hold_with_timeout(m: LLMConcurrencyManager, max_wait: float) -> LLMPermit:
    permit = m.acquire("b", timeout=max_wait)
    await permit.__aenter__()
    return permit
