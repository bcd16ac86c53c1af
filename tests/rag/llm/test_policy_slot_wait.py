"""The wait for a slot and the call's own deadline are separate: a queued call is never cut while it decodes, and a
call that cannot get a slot within its wait bound fails before anything is sent (counted when it is auxiliary)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from concurrency.cluster import RedisPermits, cluster_manager
from concurrency.context import request_scope
from concurrency.manager import LLMConcurrencyManager, set_manager
from devtools.simulator.testing import SimulatorProcess
from rag.errors import SlotUnavailable
from rag.llm.policy import SlotTerms
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.rag.llm.conftest import USER, BackendFactory
from tests.waiting import until


def chat_row(manager: LLMConcurrencyManager, key: str) -> int:
    return int(manager.stats()["backends"]["chat"][key])  # type: ignore[literal-required]


async def upstream_attempts(sim: SimulatorProcess) -> int:
    return int((await sim.astats())["endpoints"]["chat"]["attempts"])


@pytest.mark.parametrize("operation", ["complete", "stream"])
async def test_a_call_queued_longer_than_its_timeout_still_completes_once_it_holds_the_slot(
    operation: str, make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    manager.set_limit("chat", 1)
    await sim.afaults(fail_next=["stall:2:0.8", "ok"])  # the first call holds the only slot for about 0.8 s
    backend = make_backend()
    first = asyncio.create_task(backend.stream_text(backend="chat", node="answer", messages=USER))
    await until(lambda: chat_row(manager, "in_progress") == 1)

    timeout = 0.3  # far less than the queue ahead of it, and far more than its own call takes
    with request_scope("queued") as ctx:
        if operation == "complete":
            result = await backend.complete(backend="chat", node="planner", messages=USER, total_timeout=timeout)
            text = result.text
        else:
            text, _, _ = await backend.stream_text(backend="chat", node="answer", messages=USER, total_timeout=timeout)

    assert text
    assert ctx.permit_wait_s > timeout  # it did wait longer than its timeout for the slot
    assert (await first)[0]
    assert await upstream_attempts(sim) == 2


async def test_the_wait_bound_gives_busy_without_starting_the_call(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    manager.set_limit("chat", 1)
    async with manager.acquire("chat"):
        with pytest.raises(SlotUnavailable) as info:
            await make_backend().complete(
                backend="chat", node="planner", messages=USER, total_timeout=30.0, slot=SlotTerms(wait=0.05)
            )
    assert info.value.code == "busy" and info.value.reason == "slot_timeout"
    assert await upstream_attempts(sim) == 0
    assert chat_row(manager, "total_timeout") == 1
    assert manager.stats()["auxiliary_skipped"] == {}  # not auxiliary: a plain busy, not a skip


async def test_an_auxiliary_call_that_gets_no_slot_in_time_is_counted_as_skipped(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    manager.set_limit("chat", 1)
    slot = SlotTerms(wait=0.0, auxiliary="planner")
    async with manager.acquire("chat"):
        for _ in range(2):
            with pytest.raises(SlotUnavailable):
                await make_backend().complete(backend="chat", node="planner", messages=USER, slot=slot)
    manager.set_limit("chat", 2)
    await make_backend().complete(backend="chat", node="planner", messages=USER, slot=slot)  # a free slot: it runs
    assert manager.stats()["auxiliary_skipped"] == {"planner": 2}
    assert await upstream_attempts(sim) == 1


async def test_a_full_rate_window_skips_an_auxiliary_call_before_it_starts(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    backend = make_backend(rpm={"chat": 1}, rpm_window=30.0)
    await backend.complete(backend="chat", node="answer", messages=USER)
    with pytest.raises(SlotUnavailable) as info:
        await backend.complete(
            backend="chat", node="summary", messages=USER, slot=SlotTerms(wait=1.0, auxiliary="summary")
        )
    assert info.value.reason == "rate_limit"
    assert manager.stats()["auxiliary_skipped"] == {"summary": 1}
    assert await upstream_attempts(sim) == 1


async def test_a_low_priority_call_yields_the_slot_to_a_call_queued_after_it(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    manager.set_limit("chat", 1)
    backend = make_backend()
    order: list[str] = []

    async def call(name: str, slot: SlotTerms) -> None:
        await backend.complete(backend="chat", node=name, messages=USER, slot=slot)
        order.append(name)

    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(manager.acquire("chat"))
        summary = asyncio.create_task(call("summary", SlotTerms(low_priority=True, auxiliary="summary")))
        await until(lambda: chat_row(manager, "waiting") == 1)
        answer = asyncio.create_task(call("answer", SlotTerms()))
        await until(lambda: chat_row(manager, "waiting") == 2)
    await asyncio.gather(summary, answer)
    assert order == ["answer", "summary"]
    assert manager.stats()["auxiliary_skipped"] == {}


async def test_with_cluster_wide_permits_a_queued_call_completes_and_an_auxiliary_one_is_skipped(
    sim: SimulatorProcess, make_backend: BackendFactory
) -> None:
    url = suite_redis_url()
    with fresh_prefix(url, "policy-slot") as prefix:
        limits = {"default": 1, "chat": 1, "responses": 1, "embedding": 1}
        a = cluster_manager(limits, RedisPermits(redis_url=url, prefix=prefix, worker_id="A"), acquire_timeout=5.0)
        b = cluster_manager(limits, RedisPermits(redis_url=url, prefix=prefix, worker_id="B"), acquire_timeout=5.0)
        try:
            await sim.afaults(fail_next=["stall:2:0.8", "ok"])  # worker A's answer holds the cluster's only slot
            first = asyncio.create_task(make_backend().stream_text(backend="chat", node="answer", messages=USER))
            set_manager(a)
            await until(lambda: a.stats()["backends"]["chat"]["in_progress"] == 1)
            set_manager(b)
            backend = make_backend()
            with pytest.raises(SlotUnavailable):
                await backend.complete(
                    backend="chat", node="planner", messages=USER, slot=SlotTerms(wait=0.05, auxiliary="planner")
                )
            assert b.stats()["auxiliary_skipped"] == {"planner": 1}
            with request_scope("queued") as ctx:
                result = await backend.complete(backend="chat", node="planner", messages=USER, total_timeout=0.3)
            assert result.text and ctx.permit_wait_s > 0.3
            await first
            assert await upstream_attempts(sim) == 2
        finally:
            set_manager(None)
            await a.aclose()
            await b.aclose()
