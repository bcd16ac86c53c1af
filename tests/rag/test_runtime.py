"""PipelineRun: one terminal event whatever happens, including a cancel before the task first runs."""

from __future__ import annotations

import asyncio

from concurrency.errors import BusyError
from rag.deps import PipelineDeps
from rag.engine import NodeRegistry, NodeType, WorkflowDefinition
from rag.nodes import build_registry
from rag.runtime import AskRequest, PipelineRuntime
from rag.workflows.default import default_workflow
from tests.rag.nodes.support import InMemoryRetriever


def _runtime() -> PipelineRuntime:
    return PipelineRuntime(
        registry=build_registry(),
        deps_factory=lambda: PipelineDeps(retriever=InMemoryRetriever()),
        default_workflow=default_workflow(),
    )


async def test_cancel_before_the_task_starts_still_ends_the_stream_at_once() -> None:
    run = await _runtime().start(AskRequest(question="How do I reset my password?"))
    run.cancel("cancelled by the client")
    events = [event async for event in run.events()]
    assert [e["channel"] for e in events] == ["error"]
    assert events[0]["code"] == "cancelled"
    assert events[0]["seq"] == 1


async def test_cancel_mid_run_ends_with_one_cancelled_terminal() -> None:
    run = await _runtime().start(AskRequest(question="How do I reset my password?"))
    events = []
    async for event in run.events():
        events.append(event)
        if len(events) == 3:
            run.cancel()
    terminals = [e for e in events if e["channel"] in ("meta_summary", "error")]
    assert len(terminals) == 1
    assert terminals[0]["channel"] == "error"
    assert terminals[0]["code"] == "cancelled"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


async def test_closing_the_event_iterator_early_cancels_the_pipeline_task() -> None:
    run = await _runtime().start(AskRequest(question="How do I reset my password?"))
    events = run.events()
    await anext(events)
    await events.aclose()
    await asyncio.sleep(0)
    assert run.done


async def test_a_pipeline_silent_past_the_event_wait_ends_with_one_timeout_terminal() -> None:
    runtime = PipelineRuntime(
        registry=build_registry(),
        deps_factory=lambda: PipelineDeps(retriever=InMemoryRetriever(delay=30.0)),
        default_workflow=default_workflow(),
        idle_timeout=0.3,
    )
    run = await runtime.start(AskRequest(question="How do I reset my password?"))
    events = [event async for event in run.events()]  # raised TimeoutError into the transport before
    terminals = [e for e in events if e["channel"] in ("meta_summary", "error")]
    assert terminals == [events[-1]] and events[-1]["code"] == "timeout"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert run.done


def test_the_event_wait_outlasts_an_llm_call_and_its_retries(settings) -> None:
    from rag import wiring

    settings.LLM_REQUEST_TIMEOUT = 90.0
    settings.LLM_RETRY_BUDGET_SECONDS = 20.0
    assert wiring.pipeline_idle_timeout() > settings.LLM_REQUEST_TIMEOUT > settings.LLM_RETRY_BUDGET_SECONDS
    assert wiring.call_policy_config_from_settings().retry_budget == 20.0


async def test_a_busy_llm_ends_the_run_with_a_busy_error_and_its_retry_after() -> None:
    class NoSlot:
        async def run(self, state: object, writer: object) -> str | None:
            raise BusyError("chat", "rejected", retry_after=7.0, in_progress=2, waiting=4, limit=2)

    registry = NodeRegistry()
    registry.register(NodeType("no_slot", {"en": "n", "zh-hant": "n"}, (), (), lambda d, p: NoSlot()))
    runtime = PipelineRuntime(
        registry=registry,
        deps_factory=lambda: PipelineDeps(retriever=InMemoryRetriever()),
        default_workflow=default_workflow(),
    )
    workflow = WorkflowDefinition.from_dict(
        {"entry": "a", "nodes": [{"id": "a", "type": "no_slot"}], "edges": [{"source": "a", "target": "END"}]}
    )
    run = await runtime.start(AskRequest(question="How do I reset my password?"), workflow=workflow)
    terminal = [event async for event in run.events()][-1]
    assert (terminal["channel"], terminal["code"], terminal["retry_after"]) == ("error", "busy", 7.0)
