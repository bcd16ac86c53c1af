"""The real SDK exporting to a capture server on loopback: what Langfuse would receive, decoded.

Tests marked with `both_exporters` run with the thread exporter and the child-process exporter.
"""

import asyncio
import base64
import threading
import uuid

import pytest

from rag.telemetry import ScoreRecord, Telemetry, client_ref_for, trace_id_for
from rag.telemetry.langfuse_export import TRACE_NAME, LangfuseExporter
from rag.telemetry.process_export import LangfuseProcessExporter
from tests.rag.telemetry.capture import CaptureServer
from tests.rag.telemetry.support import run_request
from tests.waiting import until


@pytest.fixture
def server():
    with CaptureServer() as server:
        yield server


EXPORTERS = {"thread": LangfuseExporter, "process": LangfuseProcessExporter}
both_exporters = pytest.mark.parametrize("exporter_kind", ["thread", "process"])


@pytest.fixture
def exporter_kind():
    return "thread"


@pytest.fixture
def make_telemetry(server, exporter_kind):
    made = []

    def make(sample_rate: float = 1.0, flush_interval: float = 0.1, **options) -> Telemetry:
        exporter = EXPORTERS[exporter_kind](
            # One key per exporter: the SDK keeps one client state per public key for the whole process.
            public_key=f"pk-lf-test-{uuid.uuid4().hex[:8]}",
            secret_key="sk-lf-test",
            host=server.url,
            flush_interval=flush_interval,
            **options,
        )
        telemetry = Telemetry(sample_rate=sample_rate, exporter=exporter)
        made.append(telemetry)
        return telemetry

    yield make
    for telemetry in made:
        telemetry.shutdown(5)


def feedback_score(request_id: str, value: float = 0.0) -> ScoreRecord:
    return ScoreRecord(
        request_id=request_id,
        trace_id=trace_id_for(request_id),
        name="user_feedback",
        value=value,
        data_type="BOOLEAN",
        score_id=f"fb-{request_id}",
        comment="not what I asked",
    )


def spans_of(server, trace_id):
    return sorted((s for s in server.capture.spans if s.trace_id == trace_id), key=lambda s: (s.start_ns, s.name))


def roots_of(server, trace_id):
    return [s for s in spans_of(server, trace_id) if s.name == TRACE_NAME]


@both_exporters
async def test_a_sampled_request_exports_a_trace_with_a_span_per_node_and_a_generation(server, make_telemetry):
    telemetry = make_telemetry()
    state = await run_request(telemetry, request_id="req-export-1")
    assert telemetry.flush(5)

    trace_id = trace_id_for("req-export-1")
    spans = spans_of(server, trace_id)
    [root] = [s for s in spans if s.name == TRACE_NAME]
    assert root.parent_span_id == ""
    assert root.attributes["langfuse.trace.name"] == TRACE_NAME
    assert root.attribute_json("langfuse.observation.input") == {"question": "如何重設密碼？"}
    assert root.attribute_json("langfuse.observation.output") == {"answer": state.answer}
    assert root.attributes["session.id"] == "c-1"
    # The client id is a bearer token: Langfuse only gets a one-way hash of it.
    assert root.attributes["user.id"] == client_ref_for("anon:test")
    assert not any("anon:test" in str(value) for s in spans for value in s.attributes.values())

    nodes = [s for s in spans if s.attributes.get("langfuse.observation.type") == "span" and s is not root]
    assert [s.name for s in nodes] == state.nodes_run
    assert all(s.parent_span_id == root.span_id for s in nodes)
    planner = next(s for s in nodes if s.name == "planner")
    assert planner.attribute_json("langfuse.observation.metadata.route") == "retrieve"
    ms = planner.attribute_json("langfuse.observation.metadata.ms")
    assert planner.end_ns - planner.start_ns == pytest.approx(ms * 1e6, abs=1e3)

    [generation] = [s for s in spans if s.attributes.get("langfuse.observation.type") == "generation"]
    assert generation.name == "llm:planner"
    assert generation.parent_span_id == planner.span_id
    assert generation.attributes["langfuse.observation.model.name"] == "qwen-test"
    assert generation.attribute_json("langfuse.observation.usage_details") == {"input": 120, "output": 30, "total": 150}
    assert generation.attribute_json("langfuse.observation.metadata.node") == "planner"

    auth = next(value for h in server.capture.headers for key, value in h.items() if key.lower() == "authorization")
    public_key = telemetry.exporter.public_key
    assert auth == "Basic " + base64.b64encode(f"{public_key}:sk-lf-test".encode()).decode()


@both_exporters
async def test_shutdown_flushes_what_is_still_queued(server, make_telemetry):
    telemetry = make_telemetry(flush_interval=60)  # nothing would leave on its own during this test
    await run_request(telemetry, request_id="req-shutdown")
    await asyncio.sleep(0.3)  # a negative check: nothing leaves on its own in this time (kept as a fixed sleep)
    assert roots_of(server, trace_id_for("req-shutdown")) == []

    telemetry.shutdown(5)

    assert len(roots_of(server, trace_id_for("req-shutdown"))) == 1
    assert not telemetry.exporter.alive


@both_exporters
async def test_a_score_for_an_unsampled_request_creates_its_trace_first(server, make_telemetry):
    telemetry = make_telemetry(sample_rate=0.0)
    state = await run_request(telemetry, request_id="req-unsampled")
    telemetry.flush(5)
    trace_id = trace_id_for("req-unsampled")
    assert spans_of(server, trace_id) == []

    assert telemetry.send_score(feedback_score("req-unsampled"), trace_exported=state.trace_exported)
    telemetry.flush(5)

    kinds = [(kind, batch) for kind, batch in server.capture.events]
    first_spans = next(i for i, (kind, batch) in enumerate(kinds) if kind == "spans")
    first_score = next(i for i, (kind, batch) in enumerate(kinds) if kind == "scores")
    assert first_spans < first_score
    [root] = roots_of(server, trace_id)
    assert root.attribute_json("langfuse.observation.metadata.rebuilt_from") == "memory"
    assert root.attribute_json("langfuse.observation.output") == {"answer_chars": len(state.answer)}
    assert "rebuilt" in root.attributes["langfuse.trace.tags"]
    node_names = [s.name for s in spans_of(server, trace_id) if s.parent_span_id == root.span_id]
    assert [n for n in node_names if not n.startswith("llm:")] == state.nodes_run
    [score] = server.capture.scores
    assert score["traceId"] == trace_id
    assert (score["name"], score["value"], score["dataType"]) == ("user_feedback", 0.0, "BOOLEAN")
    assert (score["id"], score["comment"]) == ("fb-req-unsampled", "not what I asked")


async def test_a_second_score_recreates_the_same_trace_rather_than_a_copy(server, make_telemetry):
    telemetry = make_telemetry(sample_rate=0.0)
    state = await run_request(telemetry, request_id="req-twice")
    telemetry.send_score(feedback_score("req-twice", 0.0), trace_exported=state.trace_exported)
    telemetry.flush(5)
    telemetry.send_score(feedback_score("req-twice", 1.0), trace_exported=state.trace_exported)
    telemetry.flush(5)

    roots = roots_of(server, trace_id_for("req-twice"))
    assert len(roots) == 2 and roots[0].span_id == roots[1].span_id
    assert [s["id"] for s in server.capture.scores] == ["fb-req-twice", "fb-req-twice"]


async def test_a_score_for_a_sampled_request_does_not_recreate_its_trace(server, make_telemetry):
    telemetry = make_telemetry(sample_rate=1.0)
    state = await run_request(telemetry, request_id="req-sampled")
    telemetry.flush(5)
    telemetry.send_score(feedback_score("req-sampled"), trace_exported=state.trace_exported)
    telemetry.flush(5)

    assert len(roots_of(server, trace_id_for("req-sampled"))) == 1
    assert [s["traceId"] for s in server.capture.scores] == [trace_id_for("req-sampled")]
    assert telemetry.stats()["export"]["rebuilt_traces"] == 0


async def test_a_full_queue_drops_and_counts_instead_of_waiting(server, make_telemetry, monkeypatch):
    telemetry = make_telemetry(queue_size=1)
    exporter = telemetry.exporter
    entered, release = threading.Event(), threading.Event()
    real_handle = exporter._handle

    def slow_handle(item):
        entered.set()
        release.wait(5)
        real_handle(item)

    monkeypatch.setattr(exporter, "_handle", slow_handle)
    await run_request(telemetry, request_id="req-q-1")
    assert entered.wait(5)  # the worker holds the first; the queue (size 1) is empty again

    await run_request(telemetry, request_id="req-q-2")  # queued
    await run_request(telemetry, request_id="req-q-3")  # dropped
    # Dropped while the worker still holds the first: had the request waited for room, it would still be waiting.
    assert not release.is_set() and telemetry.stats()["export"]["dropped"] == 1
    release.set()
    telemetry.flush(5)

    stats = telemetry.stats()["export"]
    assert (stats["dropped"], stats["exported_traces"]) == (1, 2)
    assert roots_of(server, trace_id_for("req-q-3")) == []
    assert telemetry.summaries.get("req-q-3") is not None  # feedback can still create it


async def test_a_cancelled_request_is_exported_as_an_error_on_the_node_that_was_running(server, make_telemetry):
    from rag.state import PipelineState
    from tests.rag.nodes.support import InMemoryRetriever, make_writer
    from tests.rag.telemetry.support import compile_default

    telemetry = make_telemetry()
    retriever = InMemoryRetriever(delay=30)
    graph = compile_default(retriever)
    state = PipelineState(request_id="req-cancelled", question="如何重設密碼？")
    writer, _channel = make_writer()

    async def run():
        observer = telemetry.begin(state)
        try:
            await graph.run(state, writer, observer=observer)
        finally:
            telemetry.finish(state)

    task = asyncio.create_task(run())
    await until(lambda: retriever.calls)  # the tool executor is searching (for 30 s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    telemetry.flush(5)

    spans = {s.name: s for s in spans_of(server, trace_id_for("req-cancelled"))}
    assert spans[TRACE_NAME].attributes["langfuse.observation.level"] == "ERROR"
    assert spans[TRACE_NAME].attribute_json("langfuse.trace.metadata.status") == "cancelled"
    assert spans["tool_executor"].attributes["langfuse.observation.level"] == "ERROR"
    assert "langfuse.observation.level" not in spans["planner"].attributes
