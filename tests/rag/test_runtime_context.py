"""PipelineRun registers its request with the concurrency manager: every LLM call of a run sees the run's request
context, and the context's count of finished calls (what priority mode orders waiters by) grows call by call."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from concurrency.context import RequestContext, current_request_context, live_request_contexts
from concurrency.manager import LLMConcurrencyManager, LLMPermit
from devtools.simulator.testing import SimulatorProcess
from rag.events import Event
from rag.runtime import AskRequest, PipelineRun
from tests.rag.pipeline.conftest import (  # noqa: F401 - fixtures, used by name
    RuntimeFactory,
    check_stream,
    demo_retriever,
    make_runtime,
    manager,
    pipeline_simulator,
    sim,
)

QUESTIONS = ("How do I reset my password?", "How do I change my email address?")


class ContextAtAcquire:
    """What the manager sees of the request each time an LLM call asks it for a slot."""

    def __init__(self, limiter: LLMConcurrencyManager) -> None:
        self.calls: list[tuple[str, RequestContext | None, int | None]] = []
        self._acquire = limiter.acquire

    def __call__(self, backend: str, timeout: float | None = None, *, low_priority: bool = False) -> LLMPermit:
        ctx = current_request_context()
        self.calls.append((backend, ctx, None if ctx is None else ctx.completed_calls))
        return self._acquire(backend, timeout, low_priority=low_priority)


async def run_to_the_end(run: PipelineRun) -> list[Event]:
    return [event async for event in run.events()]


async def test_each_llm_call_sees_its_own_runs_request_context_and_the_finished_calls_grow(
    make_runtime: RuntimeFactory,  # noqa: F811
    manager: LLMConcurrencyManager,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = ContextAtAcquire(manager)
    monkeypatch.setattr(manager, "acquire", seen)
    runtime = make_runtime()
    runs = [await runtime.start(AskRequest(question=question)) for question in QUESTIONS]

    streams = await asyncio.gather(*(run_to_the_end(run) for run in runs))

    assert [check_stream(events)["channel"] for events in streams] == ["meta_summary", "meta_summary"]
    by_request: dict[str, list[int | None]] = defaultdict(list)
    contexts: dict[str, Any] = {}
    for backend, ctx, completed in seen.calls:
        assert backend == "chat"
        assert ctx is not None, "an LLM call ran outside any request context"
        by_request[ctx.request_id].append(completed)
        assert contexts.setdefault(ctx.request_id, ctx) is ctx, "one context per run, shared by all its calls"
    # The plan and the answer (the summary is written after the run, by the chat): each call starts with the calls
    # before it counted as finished.
    assert dict(by_request) == {run.state.request_id: [0, 1] for run in runs}
    for run in runs:
        ctx = contexts[run.state.request_id]
        assert ctx.completed_calls == 2
        assert ctx.arrival == run.started
    # Unregistered when the run ends, and never the caller's context.
    assert not [ctx for ctx in live_request_contexts() if ctx in contexts.values()]
    assert current_request_context() is None


async def test_a_failed_attempt_does_not_count_as_a_finished_call(
    make_runtime: RuntimeFactory,  # noqa: F811
    manager: LLMConcurrencyManager,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = ContextAtAcquire(manager)
    monkeypatch.setattr(manager, "acquire", seen)
    await sim.afaults(fail_next=["500"])  # the plan's first attempt fails and is retried

    run = await make_runtime().start(AskRequest(question=QUESTIONS[0]))
    assert check_stream(await run_to_the_end(run))["channel"] == "meta_summary"

    assert [completed for _backend, _ctx, completed in seen.calls] == [0, 0, 1]
    assert {ctx.request_id for _backend, ctx, _completed in seen.calls if ctx is not None} == {run.state.request_id}
