"""Mode switches in the local permits while a permit is being handed over (it is handed over synchronously there).
The order itself, for every source, is the ordering suite's (test_permit_ordering.py)."""

from __future__ import annotations

import asyncio

from concurrency.context import request_scope
from concurrency.manager import LLMConcurrencyManager
from tests.concurrency.manager_helpers import hold, release, settle


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
