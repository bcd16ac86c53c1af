"""Running a request through the real default workflow the way the runtime does, with telemetry around it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from rag.deps import PipelineDeps
from rag.engine import NodeRegistry, compile_workflow
from rag.engine.registry import NodeFactory
from rag.events import StreamWriter
from rag.nodes import NODE_TYPES
from rag.state import PipelineState, Usage
from rag.telemetry import FinishedTrace, ScoreRecord, Telemetry, report_generation
from rag.workflows import default_workflow
from tests.rag.nodes.support import InMemoryRetriever, drain, make_writer

PLANNER_USAGE = Usage(input_tokens=120, output_tokens=30, total_tokens=150)


class ReportingPlanner:
    """The real planner, plus the one line an LLM backend adds after each call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        started = time.time()
        route = await self.inner.run(state, writer)
        report_generation(node=self.name, model="qwen-test", usage=PLANNER_USAGE, started=started, operation="complete")
        return route


def reporting(real: NodeFactory) -> NodeFactory:
    return lambda deps, params: ReportingPlanner(real(deps, params))


def registry_with_llm_planner() -> NodeRegistry:
    registry = NodeRegistry()
    for node_type in NODE_TYPES:
        if node_type.name == "planner":
            node_type = replace(node_type, factory=reporting(node_type.factory))
        registry.register(node_type)
    return registry


def compile_default(retriever: Any = None) -> Any:
    deps = PipelineDeps(retriever=retriever or InMemoryRetriever())
    return compile_workflow(default_workflow(), registry=registry_with_llm_planner(), deps=deps)


async def run_request(
    telemetry: Telemetry, *, request_id: str, question: str = "如何重設密碼？", graph: Any = None
) -> PipelineState:
    """begin / run / finish inside the run's own task, as PipelineRun does."""
    graph = graph or compile_default()
    state = PipelineState(request_id=request_id, question=question, client_id="anon:test", conversation_id="c-1")
    writer, channel = make_writer()

    async def main() -> None:
        observer = telemetry.begin(state)
        try:
            await graph.run(state, writer, observer=observer)
        finally:
            telemetry.finish(state)

    await asyncio.create_task(main())
    await drain(channel)
    return state


class FakeExporter:
    """Records what would be exported; `accept=False` behaves like a full queue."""

    def __init__(self, *, accept: bool = True) -> None:
        self.accept = accept
        self.traces: list[FinishedTrace] = []
        self.scores: list[tuple[ScoreRecord, FinishedTrace | None]] = []

    def submit_trace(self, trace: FinishedTrace) -> bool:
        if self.accept:
            self.traces.append(trace)
        return self.accept

    def submit_score(self, score: ScoreRecord, *, trace: FinishedTrace | None) -> bool:
        self.scores.append((score, trace))
        return True

    def stats(self) -> dict[str, int]:
        return {"traces": len(self.traces), "scores": len(self.scores)}

    def flush(self, timeout: float = 10.0) -> bool:
        return True  # nothing is queued: submit records at once

    def shutdown(self, timeout: float = 10.0) -> None:
        pass
