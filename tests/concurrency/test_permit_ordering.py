"""One ordering suite for every permit source (this process's own, and Redis's for the cluster): who gets the next
permit (FIFO, priority, its ties and the starvation boost, low-priority calls last), per-backend limits, bounded
waiting, and cancellation while waiting. What is specific to one source is tested beside it: test_manager_*.py
(the local one's handoff races, deadline timers, loop binding) and test_cluster_manager.py (workers sharing
Redis, leases, outages)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from concurrency.context import request_scope
from concurrency.errors import BusyError
from concurrency.manager import LLMConcurrencyManager
from tests.concurrency.permit_sources import BOUND_S, Sources, hold, queued, release, sources_of, waiting


@pytest.fixture(params=["local", "redis"])
async def sources(request: pytest.FixtureRequest) -> AsyncIterator[Sources]:
    async for made in sources_of(request.param):
        yield made


def start(
    m: LLMConcurrencyManager,
    order: list[str],
    name: str,
    *,
    completed: int = 0,
    arrival: float | None = None,
    low_priority: bool = False,
) -> asyncio.Task[None]:
    """A request's call that records its name once it holds a permit."""

    async def run() -> None:
        with request_scope(name, arrival=arrival) as ctx:
            ctx.completed_calls = completed
            async with m.acquire("b", low_priority=low_priority):
                order.append(name)

    return asyncio.create_task(run(), name=name)


async def enqueue(
    m: LLMConcurrencyManager,
    order: list[str],
    name: str,
    *,
    completed: int = 0,
    arrival: float | None = None,
    low_priority: bool = False,
) -> asyncio.Task[None]:
    """Start a call and return once it is queued, so the enqueue order is the call order."""
    before = waiting(m)
    task = start(m, order, name, completed=completed, arrival=arrival, low_priority=low_priority)
    await queued(m, task, before)
    return task


async def enqueue_all(
    m: LLMConcurrencyManager, order: list[str], specs: list[tuple[str, int]]
) -> list[asyncio.Task[None]]:
    return [await enqueue(m, order, name, completed=completed) for name, completed in specs]


async def served(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.wait_for(asyncio.gather(*tasks), BOUND_S)


def head_ids(m: LLMConcurrencyManager) -> list[str | None]:
    return [e["request_id"] for e in m.stats(queue_head=10)["backends"]["b"]["queue_head"]]


# ---------------------------------------------------------------------- order


async def test_fifo_serves_waiters_in_arrival_order_regardless_of_progress(sources: Sources) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue_all(m, order, [("w0", 0), ("w1", 3), ("w2", 1), ("w3", 5), ("w4", 0)])
    assert head_ids(m) == ["w0", "w1", "w2", "w3", "w4"]
    await release(holder)
    await served(tasks)
    assert order == ["w0", "w1", "w2", "w3", "w4"]


async def test_priority_serves_request_with_more_completed_calls_first(sources: Sources) -> None:
    m = sources.make(priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue_all(m, order, [("a0", 0), ("b3", 3), ("c1", 1), ("d2", 2)])
    assert head_ids(m) == ["b3", "d2", "c1", "a0"]
    await release(holder)
    await served(tasks)
    assert order == ["b3", "d2", "c1", "a0"]


async def test_priority_ties_go_to_the_older_request(sources: Sources) -> None:
    m = sources.make(priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    # "young" queues first but its request arrived later than "old"'s.
    tasks = [await enqueue(m, order, "young", completed=1, arrival=200.0)]
    tasks.append(await enqueue(m, order, "old", completed=1, arrival=100.0))
    await release(holder)
    await served(tasks)
    assert order == ["old", "young"]


async def test_priority_ties_with_same_request_arrival_go_in_enqueue_order(sources: Sources) -> None:
    m = sources.make(priority_enabled=True)
    holder = await hold(m)
    order: list[str] = []
    names = ["first", "second", "third", "fourth", "fifth"]
    tasks = [await enqueue(m, order, name, completed=2, arrival=100.0) for name in names]
    await release(holder)
    await served(tasks)
    assert order == names


async def test_starvation_boost_lets_an_old_low_priority_waiter_overtake(sources: Sources) -> None:
    m = sources.make(priority_enabled=True, starvation_threshold=0.3)
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "low", completed=0)]
    await sources.let_pass(0.4)  # "low" has now waited past the threshold
    tasks.append(await enqueue(m, order, "high", completed=4))
    head = m.stats()["backends"]["b"]["queue_head"]
    assert [(e["request_id"], e["boosted"]) for e in head] == [("low", True), ("high", False)]
    await release(holder)
    await served(tasks)
    assert order == ["low", "high"]


async def test_without_starvation_the_high_priority_waiter_goes_first(sources: Sources) -> None:
    m = sources.make(priority_enabled=True, starvation_threshold=10.0)
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "low", completed=0)]
    await sources.let_pass(0.4)  # far below the threshold
    tasks.append(await enqueue(m, order, "high", completed=4))
    await release(holder)
    await served(tasks)
    assert order == ["high", "low"]


async def test_boosted_waiters_go_oldest_first_ahead_of_unboosted(sources: Sources) -> None:
    m = sources.make(priority_enabled=True, starvation_threshold=0.3)
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "old0", completed=0)]
    await sources.let_pass(0.05)
    tasks.append(await enqueue(m, order, "old2", completed=2))
    await sources.let_pass(0.4)  # both old waiters are boosted now; "fresh" is not
    tasks.append(await enqueue(m, order, "fresh", completed=5))
    await release(holder)
    await served(tasks)
    # Unboosted priority order would be fresh, old2, old0.
    assert order == ["old0", "old2", "fresh"]


async def test_switching_fifo_to_priority_reorders_queued_waiters_once_each(sources: Sources) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    tasks = await enqueue_all(m, order, [("w0", 0), ("w1", 2), ("w2", 1), ("w3", 3), ("w4", 0)])
    m.configure(priority_enabled=True)
    assert m.stats()["mode"] == "priority"
    assert head_ids(m) == ["w3", "w1", "w2", "w0", "w4"]
    await release(holder)
    await served(tasks)
    assert order == ["w3", "w1", "w2", "w0", "w4"]
    assert waiting(m) == 0


async def test_new_arrival_cannot_barge_past_queued_waiters(sources: Sources) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "queued")]
    await release(holder)  # the permit goes to "queued", not to whoever asks next
    tasks.append(start(m, order, "latecomer"))
    await served(tasks)
    assert order == ["queued", "latecomer"]


# ---------------------------------------------------------------------- low-priority calls


async def test_a_low_priority_waiter_is_served_after_every_other_waiter_in_fifo_mode(sources: Sources) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "summary", low_priority=True)]
    tasks += [await enqueue(m, order, "answer-1"), await enqueue(m, order, "answer-2")]
    assert head_ids(m) == ["answer-1", "answer-2", "summary"]
    await release(holder)
    await served(tasks)
    assert order == ["answer-1", "answer-2", "summary"]


async def test_a_low_priority_waiter_is_never_boosted_past_a_request_in_priority_mode(sources: Sources) -> None:
    m = sources.make(priority_enabled=True, starvation_threshold=0.3)
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "summary", low_priority=True)]
    await sources.let_pass(0.4)  # past the starvation threshold: a request's waiter would be boosted by now
    tasks.append(await enqueue(m, order, "answer"))
    entries = m.stats(queue_head=10)["backends"]["b"]["queue_head"]
    assert [(e["request_id"], e["boosted"]) for e in entries] == [("answer", False), ("summary", False)]
    await release(holder)
    await served(tasks)
    assert order == ["answer", "summary"]


async def test_a_low_priority_waiter_takes_a_free_permit_when_nobody_else_waits(sources: Sources) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    low = await enqueue(m, order, "summary", low_priority=True)
    await release(holder)
    await served([low])
    assert order == ["summary"]
    async with m.acquire("b", timeout=BOUND_S):  # and gave it back
        pass


# ---------------------------------------------------------------------- limits


async def test_concurrent_calls_reach_the_limit_and_never_exceed_it(sources: Sources) -> None:
    m = sources.make({"b": 3})
    running = peak = 0

    async def call() -> None:
        nonlocal running, peak
        async with m.acquire("b", timeout=BOUND_S):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.wait_for(asyncio.gather(*(call() for _ in range(12))), 2 * BOUND_S)
    assert peak == 3
    s = m.stats()["backends"]["b"]
    assert (s["limit"], s["in_progress"], s["waiting"]) == (3, 0, 0)
    assert s["total_acquired"] == s["total_released"] == 12


async def test_each_backend_has_its_own_limit(sources: Sources) -> None:
    m = sources.make({"b": 1, "other": 2})
    held = await hold(m, "b")
    async with m.acquire("other", timeout=0), m.acquire("other", timeout=BOUND_S):  # "b" being full is no matter
        with pytest.raises(BusyError):
            async with m.acquire("other", timeout=0):
                pass
    with pytest.raises(BusyError):
        async with m.acquire("b", timeout=0):
            pass
    await release(held)


async def test_raising_a_limit_admits_queued_waiters_without_any_release(sources: Sources) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, f"w{i}") for i in range(3)]
    m.set_limit("b", 4)
    await served(tasks)
    assert sorted(order) == ["w0", "w1", "w2"]
    await release(holder)


# ---------------------------------------------------------------------- bounded waiting


async def test_acquire_timeout_fails_busy_counts_it_and_leaves_no_waiter(sources: Sources) -> None:
    m = sources.make(acquire_timeout=0.2)
    holder = await hold(m)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BusyError) as raised:
        async with m.acquire("b"):
            pytest.fail("must not get a permit")
    assert loop.time() - started >= 0.19
    err = raised.value
    assert (err.backend, err.reason, err.limit) == ("b", "timeout", 1)
    assert err.retry_after >= 1.0
    s = m.stats()["backends"]["b"]
    assert (s["total_timeout"], s["waiting"], s["in_progress"]) == (1, 0, 1)
    await release(holder)
    async with m.acquire("b", timeout=BOUND_S):  # nobody stale is ahead in the queue
        pass


async def test_zero_timeout_only_takes_a_free_permit(sources: Sources) -> None:
    m = sources.make()
    async with m.acquire("b", timeout=0):
        with pytest.raises(BusyError) as raised:
            async with m.acquire("b", timeout=0):
                pass
        assert raised.value.reason == "timeout"
    s = m.stats()["backends"]["b"]
    assert (s["total_timeout"], s["total_acquired"], s["total_released"]) == (1, 1, 1)


async def test_waiters_past_max_waiters_are_rejected_at_once(sources: Sources) -> None:
    m = sources.make(max_waiters=2)
    holder = await hold(m)
    order: list[str] = []
    tasks = [await enqueue(m, order, "w0"), await enqueue(m, order, "w1")]
    with pytest.raises(BusyError) as raised:
        async with m.acquire("b"):
            pass
    assert raised.value.reason == "rejected"
    assert "queue is full" in str(raised.value)
    s = m.stats()["backends"]["b"]
    assert (s["total_rejected"], s["waiting"], s["total_timeout"]) == (1, 2, 0)
    await release(holder)
    await served(tasks)
    assert order == ["w0", "w1"]


# ---------------------------------------------------------------------- cancellation


@pytest.mark.parametrize("low_priority", [False, True])
async def test_a_waiter_cancelled_while_queued_frees_its_place(sources: Sources, low_priority: bool) -> None:
    m = sources.make()
    holder = await hold(m)
    order: list[str] = []
    doomed = await enqueue(m, order, "doomed", low_priority=low_priority)
    survivor = await enqueue(m, order, "survivor", low_priority=low_priority)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert waiting(m) == 1
    await release(holder)
    await served([survivor])  # the place went to the next waiter, not to the cancelled one
    assert order == ["survivor"]
    s = m.stats()["backends"]["b"]
    assert (s["waiting"], s["in_progress"], s["total_acquired"], s["total_released"]) == (0, 0, 2, 2)


async def test_cancelling_a_holder_inside_its_block_gives_its_permit_back(sources: Sources) -> None:
    m = sources.make()
    entered = asyncio.Event()

    async def body() -> None:
        async with m.acquire("b"):
            entered.set()
            await asyncio.Event().wait()  # cancelled below; never set

    task = asyncio.create_task(body())
    await asyncio.wait_for(entered.wait(), BOUND_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with m.acquire("b", timeout=BOUND_S):
        pass


async def test_completed_calls_count_only_blocks_that_exit_normally(sources: Sources) -> None:
    m = sources.make()
    with request_scope("r1") as ctx:
        async with m.acquire("b"):
            pass
        with pytest.raises(RuntimeError):
            async with m.acquire("b", timeout=BOUND_S):
                raise RuntimeError("LLM call failed")
        async with m.acquire("b", timeout=BOUND_S):
            with pytest.raises(BusyError):
                async with m.acquire("b", timeout=0):
                    pass
        assert ctx.completed_calls == 2
    assert m.stats()["backends"]["b"]["in_progress"] == 0
