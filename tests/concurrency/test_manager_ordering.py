"""Who gets the next permit: FIFO, priority, starvation boost, tie-breaks and mode switches."""

from __future__ import annotations

import asyncio

from concurrency.context import request_scope
from concurrency.manager import LLMConcurrencyManager
from tests.concurrency.manager_helpers import hold, release, settle
from tests.fake_clock import FakeClock


def start_waiter(
    m: LLMConcurrencyManager,
    order: list[str],
    name: str,
    *,
    completed: int = 0,
    arrival: float | None = None,
) -> asyncio.Task[None]:
    async def run() -> None:
        with request_scope(name, arrival=arrival) as ctx:
            ctx.completed_calls = completed
            async with m.acquire("b"):
                order.append(name)

    return asyncio.create_task(run(), name=name)


async def enqueue(m: LLMConcurrencyManager, order: list[str], specs: list[tuple[str, int]]) -> list[asyncio.Task[None]]:
    tasks = []
    for name, completed in specs:
        tasks.append(start_waiter(m, order, name, completed=completed))
        await settle()  # one at a time, so enqueue order is the list order
    assert m.stats()["backends"]["b"]["waiting"] == len(specs)
    return tasks


async def enqueue_more(
    m: LLMConcurrencyManager, order: list[str], name: str, completed: int
) -> list[asyncio.Task[None]]:
    task = start_waiter(m, order, name, completed=completed)
    await settle()
    return [task]


def head_ids(m: LLMConcurrencyManager) -> list[str | None]:
    return [e["request_id"] for e in m.stats(queue_head=10)["backends"]["b"]["queue_head"]]


async def test_fifo_serves_waiters_in_arrival_order_regardless_of_progress() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("w0", 0), ("w1", 3), ("w2", 1), ("w3", 5), ("w4", 0)])
    assert head_ids(m) == ["w0", "w1", "w2", "w3", "w4"]
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["w0", "w1", "w2", "w3", "w4"]


async def test_priority_serves_request_with_more_completed_calls_first() -> None:
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("a0", 0), ("b3", 3), ("c1", 1), ("d2", 2)])
    assert head_ids(m) == ["b3", "d2", "c1", "a0"]
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["b3", "d2", "c1", "a0"]


async def test_priority_ties_go_to_the_older_request() -> None:
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    # "young" queues first but its request arrived later than "old"'s.
    tasks = [start_waiter(m, order, "young", completed=1, arrival=200.0)]
    await settle()
    tasks.append(start_waiter(m, order, "old", completed=1, arrival=100.0))
    await settle()
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["old", "young"]


async def test_priority_ties_with_same_request_arrival_go_in_enqueue_order() -> None:
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    tasks = []
    for name in ("first", "second", "third"):
        tasks.append(start_waiter(m, order, name, completed=2, arrival=100.0))
        await settle()
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["first", "second", "third"]


async def test_starvation_boost_lets_an_old_low_priority_waiter_overtake() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True, starvation_threshold=5.0, clock=clock)
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("low", 0)])
    clock.advance(6.0)  # "low" has now waited past the threshold
    tasks += await enqueue_more(m, order, "high", 4)
    head = m.stats()["backends"]["b"]["queue_head"]
    assert [(e["request_id"], e["boosted"]) for e in head] == [("low", True), ("high", False)]
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["low", "high"]


async def test_without_starvation_the_high_priority_waiter_goes_first() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True, starvation_threshold=10.0, clock=clock)
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("low", 0)])
    clock.advance(6.0)  # below the threshold
    tasks += await enqueue_more(m, order, "high", 4)
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["high", "low"]


async def test_boosted_waiters_go_oldest_first_ahead_of_unboosted() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True, starvation_threshold=5.0, clock=clock)
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("old0", 0)])
    clock.advance(1.0)
    tasks += await enqueue_more(m, order, "old2", 2)
    clock.advance(19.0)  # both old waiters are boosted now; "fresh" is not
    tasks += await enqueue_more(m, order, "fresh", 5)
    await release(holder)
    await asyncio.gather(*tasks)
    # Unboosted priority order would be fresh, old2, old0.
    assert order == ["old0", "old2", "fresh"]


async def test_switching_fifo_to_priority_reorders_queued_waiters_once_each() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("w0", 0), ("w1", 2), ("w2", 1), ("w3", 3), ("w4", 0)])
    m.configure(priority_enabled=True)
    assert m.stats()["mode"] == "priority"
    assert head_ids(m) == ["w3", "w1", "w2", "w0", "w4"]
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["w3", "w1", "w2", "w0", "w4"]
    assert m.stats()["backends"]["b"]["waiting"] == 0


async def test_switching_mode_mid_service_keeps_every_waiter_exactly_once() -> None:
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("w0", 0), ("w1", 2), ("w2", 1), ("w3", 3), ("w4", 0)])
    await release(holder)  # hands the permit to w3 (highest priority) synchronously
    m.configure(priority_enabled=False)  # the rest must now go in arrival order
    await asyncio.gather(*tasks)
    assert order == ["w3", "w0", "w1", "w2", "w4"]


async def test_switching_priority_on_and_off_with_waiters_queued_falls_back_to_arrival_order() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("w0", 0), ("w1", 2), ("w2", 1)])
    m.configure(priority_enabled=True)
    m.configure(priority_enabled=False)
    m.configure(priority_enabled=True)
    await release(holder)  # w1 granted under priority
    m.configure(priority_enabled=False)
    await asyncio.gather(*tasks)
    assert order == ["w1", "w0", "w2"]
    s = m.stats()["backends"]["b"]
    assert (s["waiting"], s["in_progress"], s["total_acquired"], s["total_released"]) == (0, 0, 4, 4)


async def test_new_arrival_cannot_barge_past_queued_waiters() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue(m, order, [("queued", 0)])
    await release(holder)  # permit goes straight to "queued": available stays 0
    assert m.stats()["backends"]["b"]["available"] == 0
    tasks.append(start_waiter(m, order, "latecomer"))
    await asyncio.gather(*tasks)
    assert order == ["queued", "latecomer"]


def start_low_waiter(m: LLMConcurrencyManager, order: list[str], name: str) -> asyncio.Task[None]:
    async def run() -> None:
        with request_scope(name):
            async with m.acquire("b", low_priority=True):
                order.append(name)

    return asyncio.create_task(run(), name=name)


async def test_a_low_priority_waiter_is_served_after_every_other_waiter_in_fifo_mode() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    low = start_low_waiter(m, order, "summary")
    await settle()
    tasks = [low, *await enqueue_more(m, order, "answer-1", 0), *await enqueue_more(m, order, "answer-2", 0)]
    assert head_ids(m) == ["answer-1", "answer-2", "summary"]
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["answer-1", "answer-2", "summary"]


async def test_a_low_priority_waiter_is_never_boosted_past_a_request_in_priority_mode() -> None:
    clock = FakeClock()
    m = LLMConcurrencyManager({"b": 1}, priority_enabled=True, starvation_threshold=5.0, clock=clock)
    holder = await hold(m)
    order: list[str] = []
    low = start_low_waiter(m, order, "summary")
    await settle()
    clock.advance(60.0)  # far past the starvation threshold: a request's waiter would be boosted by now
    tasks = [low, *await enqueue_more(m, order, "answer", 0)]
    entries = m.stats(queue_head=10)["backends"]["b"]["queue_head"]
    assert [(e["request_id"], e["boosted"]) for e in entries] == [("answer", False), ("summary", False)]
    await release(holder)
    await asyncio.gather(*tasks)
    assert order == ["answer", "summary"]


async def test_a_low_priority_waiter_takes_a_free_permit_when_nobody_else_waits() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    low = start_low_waiter(m, order, "summary")
    await settle()
    await release(holder)
    await low
    assert order == ["summary"]
    assert m.stats()["backends"]["b"]["in_progress"] == 0


async def test_a_cancelled_low_priority_waiter_leaves_no_waiter_behind() -> None:
    m = LLMConcurrencyManager({"b": 1})
    holder = await hold(m)
    order: list[str] = []
    low = start_low_waiter(m, order, "summary")
    await settle()
    low.cancel()
    await asyncio.gather(low, return_exceptions=True)
    assert m.stats()["backends"]["b"]["waiting"] == 0
    await release(holder)
    assert order == [] and m.stats()["backends"]["b"]["in_progress"] == 0
