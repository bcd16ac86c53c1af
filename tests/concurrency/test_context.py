"""RequestContext travels in a ContextVar: registered per request, isolated between tasks."""

from __future__ import annotations

import asyncio
import contextvars
import gc

from concurrency.context import (
    RequestContext,
    current_request_context,
    live_request_contexts,
    request_context_register,
    request_context_unregister,
    request_scope,
)


def test_register_sets_current_and_unregister_clears_it() -> None:
    assert current_request_context() is None
    ctx = request_context_register("r1")
    try:
        assert current_request_context() is ctx
        assert (ctx.request_id, ctx.completed_calls) == ("r1", 0)
        assert ctx in live_request_contexts()
    finally:
        request_context_unregister()
    assert current_request_context() is None
    assert ctx not in live_request_contexts()
    request_context_unregister()  # nothing current: a no-op


def test_request_scope_nests_and_restores_the_outer_request() -> None:
    with request_scope("outer") as outer:
        with request_scope("inner", arrival=5.0) as inner:
            assert current_request_context() is inner
            assert inner.arrival == 5.0
        assert current_request_context() is outer
    assert current_request_context() is None


def test_request_scope_unregisters_on_error() -> None:
    try:
        with request_scope("boom"):
            raise KeyError("x")
    except KeyError:
        pass
    assert current_request_context() is None
    assert all(c.request_id != "boom" for c in live_request_contexts())


async def test_concurrent_tasks_each_see_only_their_own_request() -> None:
    both_registered = asyncio.Barrier(2)
    seen: dict[str, list[str | None]] = {}

    async def handle(request_id: str) -> None:
        with request_scope(request_id) as ctx:
            await both_registered.wait()  # interleave: both scopes are open at the same time
            ctx.completed_calls += 1
            await asyncio.sleep(0)
            current = current_request_context()
            seen[request_id] = [current.request_id if current else None, str(current.completed_calls if current else 0)]

    await asyncio.gather(handle("a"), handle("b"))
    assert seen == {"a": ["a", "1"], "b": ["b", "1"]}
    assert current_request_context() is None  # nothing leaked into the parent


async def test_subtasks_share_their_request_context() -> None:
    with request_scope("parent") as ctx:

        async def call() -> None:
            current = current_request_context()
            assert current is ctx
            current.completed_calls += 1

        await asyncio.gather(call(), call(), asyncio.create_task(call()))
        assert ctx.completed_calls == 3


def test_unregister_from_another_context_removes_it_without_error() -> None:
    holder: list[RequestContext] = []
    contextvars.copy_context().run(lambda: holder.append(request_context_register("elsewhere")))
    ctx = holder[0]
    assert ctx in live_request_contexts()
    request_context_unregister(ctx)  # its token belongs to the other context
    request_context_unregister(ctx)  # and twice is harmless
    assert ctx not in live_request_contexts()


def test_live_registry_is_oldest_first_and_forgets_dropped_contexts() -> None:
    def forgotten() -> None:
        # Registered in a throwaway context and never unregistered: the weak registry must not leak it.
        request_context_register("forgotten")

    contextvars.copy_context().run(forgotten)
    gc.collect()
    assert all(c.request_id != "forgotten" for c in live_request_contexts())
    with request_scope("late", arrival=20.0), request_scope("early", arrival=10.0):
        ids = [c.request_id for c in live_request_contexts() if c.request_id in {"late", "early"}]
        assert ids == ["early", "late"]


def test_age_counts_from_arrival() -> None:
    ctx = RequestContext("r", arrival=100.0)
    assert ctx.age(now=102.5) == 2.5
