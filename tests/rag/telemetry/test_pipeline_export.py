"""The server's own runtime, built from settings (`LLM_BASE_URL` at the vLLM simulator, Langfuse keys at a capture
server, the default child-process exporter), traced at rate 1.0: what Langfuse would receive for a request.

The generations' model and usage are the LLM backend's own reports of the calls the simulator answered.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from concurrency.live import settings_forget
from concurrency.manager import reset_manager
from devtools.simulator.testing import SimulatorProcess
from rag.events import Event
from rag.llm.client import aclose_clients
from rag.runtime import AskRequest
from rag.telemetry import get_telemetry, reset_telemetry, trace_id_for
from rag.telemetry.langfuse_export import TRACE_NAME
from rag.wiring import get_runtime, reset_runtime
from tests.rag.pipeline.conftest import RETRIEVAL_PATH, pipeline_simulator, sim  # noqa: F401 - fixtures, used by name
from tests.rag.telemetry.capture import CapturedSpan, CaptureServer
from tests.waiting import until_async

pytestmark = pytest.mark.django_db(transaction=True)  # the prompt registry reads its prompts

QUESTION = "How do I reset my password?"
LEVEL = "langfuse.observation.level"


@pytest.fixture
def capture_server() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture
async def server_runtime(
    settings: Any,
    capture_server: CaptureServer,
    sim: SimulatorProcess,  # noqa: F811
) -> AsyncIterator[Any]:
    """The settings of a server with an LLM and Langfuse; the process's runtime and telemetry built from them."""
    settings.LLM_BASE_URL = sim.base_url
    settings.LLM_API_KEY = "test"
    settings.LLM_CHAT_MODEL = "sim-chat"
    settings.LLM_RESPONSES_MODEL = "sim-chat"
    settings.LLM_RETRY_MAX_ATTEMPTS = 3
    settings.LLM_RETRY_BASE_SECONDS = 0.01
    settings.LLM_RETRY_MAX_SECONDS = 0.05
    settings.RAG_DEGRADED_ANSWERS = False  # a failed answer ends the trace with its error, as these tests follow
    settings.LANGFUSE_PUBLIC_KEY = f"pk-lf-pipeline-{uuid.uuid4().hex[:8]}"
    settings.LANGFUSE_SECRET_KEY = "sk-lf-pipeline"
    settings.LANGFUSE_HOST = capture_server.url
    settings.LANGFUSE_SAMPLE_RATE = 1.0
    settings.LANGFUSE_FLUSH_INTERVAL = 0.1
    await asyncio.to_thread(reset_runtime)
    await asyncio.to_thread(reset_telemetry)
    settings_forget()
    reset_manager()
    yield get_runtime()
    await aclose_clients()
    await asyncio.to_thread(reset_runtime)
    await asyncio.to_thread(reset_telemetry)
    settings_forget()
    reset_manager()


async def ask(runtime: Any, backend: str = "chat") -> tuple[str, list[Event]]:
    run = await runtime.start(AskRequest(question=QUESTION, backend=backend))
    events = [event async for event in run.events()]
    assert get_telemetry().exporter is not None and type(get_telemetry().exporter).__name__.endswith("ProcessExporter")
    assert await asyncio.to_thread(get_telemetry().flush, 10)
    return run.state.request_id, events


def trace_spans(server: CaptureServer, request_id: str) -> tuple[CapturedSpan, list[CapturedSpan], list[CapturedSpan]]:
    """(root, node spans, generations) of a request's trace, each list in start order."""
    spans = sorted(
        (s for s in server.capture.spans if s.trace_id == trace_id_for(request_id)), key=lambda s: s.start_ns
    )
    [root] = [s for s in spans if s.name == TRACE_NAME]
    kind = "langfuse.observation.type"
    nodes = [s for s in spans if s is not root and s.attributes.get(kind) == "span"]
    generations = [s for s in spans if s.attributes.get(kind) == "generation"]
    return root, nodes, generations


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_a_traced_request_exports_a_span_per_node_and_each_llm_calls_generation_with_its_usage(
    server_runtime: Any, capture_server: CaptureServer, backend: str
) -> None:
    request_id, events = await ask(server_runtime, backend)
    assert events[-1]["channel"] == "meta_summary"

    root, nodes, generations = trace_spans(capture_server, request_id)
    assert root.attribute_json("langfuse.trace.metadata.status") == "ok" and LEVEL not in root.attributes
    assert [s.name for s in nodes] == RETRIEVAL_PATH
    assert all(s.parent_span_id == root.span_id for s in nodes)

    # One generation per LLM call, in the order the calls reported their usage to the client.
    calls = [e for e in events if e["channel"] == "meta" and e["stage"] == "usage"]
    assert [(e["node"], e["call"]) for e in calls] == [
        ("planner", "plan"),
        ("response_synth", "answer"),
    ]  # the conversation summary is written after the terminal event, by the chat that stores the conversation
    # Named after the backend's label for the call; nested in the node that made it.
    assert [g.name for g in generations] == ["llm:planner", "llm:response_synth"]
    node_span = {s.name: s for s in nodes}
    for generation, call in zip(generations, calls, strict=True):
        assert generation.attributes["langfuse.observation.model.name"] == "sim-chat"
        usage = call["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert generation.attribute_json("langfuse.observation.usage_details") == {
            "input": usage["input_tokens"],
            "output": usage["output_tokens"],
            "total": usage["total_tokens"],
        }
        assert generation.parent_span_id == node_span[call["node"]].span_id
        assert LEVEL not in generation.attributes
    operations = [g.attribute_json("langfuse.observation.metadata.operation") for g in generations]
    assert operations == ["complete", "stream"]


async def test_failed_llm_calls_are_exported_as_generations_with_their_error(
    server_runtime: Any,
    capture_server: CaptureServer,
    sim: SimulatorProcess,  # noqa: F811
) -> None:
    await sim.afaults(rate_500=1.0)  # every attempt fails: the planner falls back to its rules, the answer fails

    request_id, events = await ask(server_runtime)

    assert (events[-1]["channel"], events[-1]["code"]) == ("error", "upstream_error")
    root, nodes, generations = trace_spans(capture_server, request_id)
    assert root.attributes[LEVEL] == "ERROR"
    assert [g.name for g in generations] == ["llm:planner", "llm:response_synth"]
    for generation, operation in zip(generations, ["complete", "stream"], strict=True):
        assert generation.attributes[LEVEL] == "ERROR"
        message = generation.attributes["langfuse.observation.status_message"]
        assert message.startswith("upstream_error: ") and "HTTP 500, 3 attempt(s)" in message
        assert generation.attributes["langfuse.observation.model.name"] == "sim-chat"
        assert generation.attribute_json("langfuse.observation.metadata.operation") == operation
        assert generation.attribute_json("langfuse.observation.usage_details") == {"input": 0, "output": 0, "total": 0}
    assert generations[0].parent_span_id == next(s.span_id for s in nodes if s.name == "planner")


async def test_a_call_cut_short_by_a_cancelled_request_is_exported_as_a_cancelled_generation(
    server_runtime: Any,
    capture_server: CaptureServer,
    sim: SimulatorProcess,  # noqa: F811
) -> None:
    await sim.afaults(fail_next=["ok", "hang"])  # the plan is answered, the answer never starts
    run = await server_runtime.start(AskRequest(question=QUESTION))

    async def read() -> None:
        async for _event in run.events():
            pass

    reader = asyncio.create_task(read())
    # until the answer's call is at the simulator
    await until_async(sim.astats, lambda stats: stats["attempts"] >= 2, within=10.0)
    run.cancel("cancelled by the client")
    await asyncio.wait_for(reader, 5)
    assert await asyncio.to_thread(get_telemetry().flush, 10)

    root, _nodes, generations = trace_spans(capture_server, run.state.request_id)
    assert root.attribute_json("langfuse.trace.metadata.status") == "cancelled"
    assert [g.name for g in generations] == ["llm:planner", "llm:response_synth"]
    assert LEVEL not in generations[0].attributes
    assert generations[1].attributes[LEVEL] == "ERROR"
    assert generations[1].attributes["langfuse.observation.status_message"] == "cancelled"
