"""Each node writes only the state fields it declares as OUTPUTS (checked at build time by the dataflow check,
here at run time): the default workflow runs offline and against the LLM simulator, and every node's writes are
compared with its declaration as it finishes."""

from __future__ import annotations

import copy
from typing import Any

from rag.deps import PipelineDeps
from rag.engine import compile_workflow
from rag.events import EventChannel, StreamWriter
from rag.llm import LLMBackend
from rag.nodes import build_registry
from rag.nodes.cache_response import CacheResponse
from rag.prompting.prompts import CataloguePrompts
from rag.state import STATE_FIELDS, PipelineState, Turn
from rag.workflows.default import default_workflow
from tests.rag.llm.conftest import BackendFactory
from tests.rag.nodes.support import InMemoryRetriever

# Written by the run, not by a node's dataflow: the engine appends each node it ran, and every LLM call adds its
# tokens to the request's total (a request field, counted for the summary and the telemetry).
RUN_BOOKKEEPING = frozenset({"nodes_run", "usage"})
# The last answer and an instruction the offline rules and the model both take as a follow-up transform.
HISTORY = [
    Turn("user", "How do I reset my password?"),
    Turn("assistant", "Open the sign-in page and choose Forgot password; the link is valid for 30 minutes. [1]"),
]


def _snapshot(state: PipelineState) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in STATE_FIELDS:
        value = getattr(state, name)
        out[name] = value if callable(value) else copy.deepcopy(value)
    return out


class WriteRecorder:
    """A RunObserver: the fields each node changed between its start and its end."""

    def __init__(self, state: PipelineState) -> None:
        self.state = state
        self.before: dict[str, Any] = {}
        self.written: dict[str, set[str]] = {}

    def node_started(self, node_id: str) -> None:
        self.before = _snapshot(self.state)

    def node_finished(self, node_id: str, route: str, ms: float) -> None:
        after = _snapshot(self.state)
        changed = {name for name in STATE_FIELDS if after[name] != self.before[name]}
        self.written.setdefault(node_id, set()).update(changed - RUN_BOOKKEEPING)


async def run_recorded(deps: PipelineDeps, question: str, **fields: Any) -> dict[str, set[str]]:
    graph = compile_workflow(default_workflow(), registry=build_registry(), deps=deps)
    state = PipelineState(request_id="req-1", question=question, **fields)
    recorder = WriteRecorder(state)
    await graph.run(state, StreamWriter("req-1", EventChannel(max_pending=100_000)), observer=recorder)
    return recorder.written


def undeclared(written: dict[str, set[str]]) -> dict[str, list[str]]:
    registry = build_registry()
    out = {}
    for node_id, fields in written.items():
        node_type = registry.get(node_id)
        assert node_type is not None, node_id
        extra = sorted(fields - set(node_type.outputs))
        if extra:
            out[node_id] = extra
    return out


def merge(*runs: dict[str, set[str]]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for run in runs:
        for node_id, fields in run.items():
            merged.setdefault(node_id, set()).update(fields)
    return merged


async def test_the_recorder_sees_a_write_the_node_does_not_declare() -> None:
    state = PipelineState(request_id="req-1", question="q", cache_hit={"answer": "Cached.", "sources": []})
    recorder = WriteRecorder(state)
    recorder.node_started("cache_response")
    await CacheResponse(stream_chunk_chars=8).run(state, StreamWriter("req-1", EventChannel(max_pending=1000)))
    state.intent = "written behind the declaration's back"
    recorder.node_finished("cache_response", "default", 0.0)

    assert recorder.written["cache_response"] == {"answer", "intent"}
    assert undeclared(recorder.written) == {"cache_response": ["intent"]}


async def test_offline_every_node_writes_only_its_declared_outputs() -> None:
    deps = PipelineDeps(retriever=InMemoryRetriever())
    written = merge(
        await run_recorded(deps, "How do I reset my password?"),
        await run_recorded(deps, "Summarize that", history=list(HISTORY)),
        await run_recorded(deps, "   "),
    )
    state = PipelineState(request_id="req-1", question="q", cache_hit={"answer": "Cached. [1]", "sources": []})
    recorder = WriteRecorder(state)
    recorder.node_started("cache_response")
    await CacheResponse(stream_chunk_chars=8).run(state, StreamWriter("req-1", EventChannel(max_pending=1000)))
    recorder.node_finished("cache_response", "default", 0.0)
    written = merge(written, recorder.written)

    assert undeclared(written) == {}
    assert set(written) == set(build_registry().names())  # every node ran at least once


async def test_with_the_llm_every_node_writes_only_its_declared_outputs(make_backend: BackendFactory) -> None:
    llm: LLMBackend = make_backend()
    deps = PipelineDeps(retriever=InMemoryRetriever(), llm=llm, prompts=CataloguePrompts())
    written = merge(
        await run_recorded(deps, "How do I reset my password?"),
        await run_recorded(deps, "How long is it valid?", history=list(HISTORY)),
    )

    assert undeclared(written) == {}
    assert {"language_normalizer", "planner", "query_builder", "response_synth"} <= set(written)
