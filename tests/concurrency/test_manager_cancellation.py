"""Cancellation in the local permits never leaks or loses a permit, including the cancel-at-handoff race (a waiter
cancelled while queued, for every source: the ordering suite, test_permit_ordering.py)."""

from __future__ import annotations

import asyncio

import pytest

from concurrency.context import request_scope
from concurrency.manager import LLMConcurrencyManager, LLMPermit
from tests.concurrency.manager_helpers import hold, release, settle


def assert_idle(m: LLMConcurrencyManager, backend: str = "b") -> None:
    s = m.stats()["backends"][backend]
    assert (s["in_progress"], s["waiting"], s["available"]) == (0, 0, s["limit"])
    assert s["total_acquired"] == s["total_released"]
    assert s["queue_head"] == []


async def test_waiter_cancelled_in_the_same_step_as_handoff_passes_the_permit_on() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    doomed = asyncio.create_task(hold(m))
    await settle()
    successor = asyncio.create_task(hold(m))
    await settle()
    await release(holder)  # hands the permit to `doomed`, whose task has not resumed yet
    assert m.stats()["backends"]["b"]["in_progress"] == 1
    doomed.cancel()  # same loop step: the grant and the cancellation race
    with pytest.raises(asyncio.CancelledError):
        await doomed
    permit = await asyncio.wait_for(successor, timeout=1.0)  # it got the passed-on permit
    await release(permit)
    assert_idle(m)


async def test_waiter_cancelled_at_handoff_with_nobody_behind_returns_the_permit() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    doomed = asyncio.create_task(hold(m))
    await settle()
    await release(holder)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert_idle(m)


@pytest.mark.parametrize("priority", [False, True])
async def test_cancelled_waiter_is_skipped_if_release_comes_before_its_handler_runs(priority: bool) -> None:
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=priority)
    holder = await hold(m)
    doomed = asyncio.create_task(hold(m))
    await settle()
    survivor = asyncio.create_task(hold(m))
    await settle()
    doomed.cancel()  # its future is cancelled, but its except-handler has not run yet
    await release(holder)  # must skip `doomed` and grant `survivor`
    with pytest.raises(asyncio.CancelledError):
        await doomed
    await release(await asyncio.wait_for(survivor, timeout=1.0))
    assert_idle(m)


async def test_cancelled_high_priority_waiter_is_skipped_in_the_heap() -> None:
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True)
    holder = await hold(m)
    survivor = asyncio.create_task(hold(m))  # no request context: lowest priority, deque head
    await settle()

    async def favoured() -> LLMPermit:
        with request_scope("favoured") as ctx:
            ctx.completed_calls = 3
            return await hold(m)

    doomed = asyncio.create_task(favoured())
    await settle()
    doomed.cancel()
    await release(holder)  # heap top is `doomed`: it must be skipped, not handed a permit
    with pytest.raises(asyncio.CancelledError):
        await doomed
    await release(await asyncio.wait_for(survivor, timeout=1.0))
    assert_idle(m)
