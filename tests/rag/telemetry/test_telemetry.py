"""The Telemetry facade and its request-side record, without the SDK (a fake exporter stands in)."""

import asyncio
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rag.state import PipelineState
from rag.telemetry import (
    ScoreRecord,
    Telemetry,
    build_telemetry_from_settings,
    current_trace,
    report_generation,
    trace_id_for,
)
from tests.rag.nodes.support import InMemoryRetriever, make_writer
from tests.rag.telemetry.support import PLANNER_USAGE, FakeExporter, compile_default, run_request
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]


def score_for(request_id: str) -> ScoreRecord:
    return ScoreRecord(
        request_id=request_id,
        trace_id=trace_id_for(request_id),
        name="user_feedback",
        value=1.0,
        data_type="BOOLEAN",
        score_id="s-1",
    )


@pytest.fixture
def no_network(monkeypatch):
    attempts = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


async def test_without_keys_it_is_a_noop_that_starts_nothing_and_sends_nothing(settings, no_network):
    settings.LANGFUSE_PUBLIC_KEY = settings.LANGFUSE_SECRET_KEY = ""
    threads_before = set(threading.enumerate())
    telemetry = build_telemetry_from_settings()

    state = await run_request(telemetry, request_id="r-off")

    assert not telemetry.enabled
    assert state.answer and state.trace_id == ""
    assert telemetry.send_score(score_for("r-off"), trace_exported=False) is False
    assert state.trace_exported is False
    assert telemetry.flush() is True
    telemetry.shutdown()
    # Nothing started (threads of earlier tests, such as a capture server's connection handlers, may end meanwhile).
    assert set(threading.enumerate()) <= threads_before
    assert no_network == []
    # The sampler still counts, so staff can see what a rate would trace.
    assert telemetry.stats() == {
        "enabled": False,
        "sampler": {"sample_rate": 1.0, "total_checks": 1, "sampled_count": 1, "actual_rate": 1.0},
    }


def test_without_keys_the_sdk_is_never_imported():
    code = (
        "import sys, threading, django; django.setup()\n"
        "from rag.telemetry import build_telemetry_from_settings\n"
        "t = build_telemetry_from_settings()\n"
        "assert not t.enabled\n"
        "assert 'langfuse' not in sys.modules and 'opentelemetry.sdk' not in sys.modules, 'SDK imported'\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


async def test_a_sampled_request_is_handed_over_with_a_span_per_node_and_its_generations():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=1.0, exporter=exporter)

    state = await run_request(telemetry, request_id="r-1")

    [trace] = exporter.traces
    assert state.trace_exported is True
    assert state.trace_id == trace.trace_id == trace_id_for("r-1")
    assert (trace.question, trace.answer, trace.status) == ("如何重設密碼？", state.answer, "ok")
    assert [node.node for node in trace.nodes] == state.nodes_run
    assert all(node.ms is not None and node.ms >= 0 for node in trace.nodes)
    planner = next(node for node in trace.nodes if node.node == "planner")
    assert planner.route == "retrieve"
    [generation] = trace.generations
    assert (generation.node, generation.model) == ("planner", "qwen-test")
    assert (generation.input_tokens, generation.output_tokens, generation.total_tokens) == (120, 30, 150)
    assert trace.start_ns <= generation.start_ns <= generation.end_ns <= trace.end_ns
    assert telemetry.stats()["sampler"]["sampled_count"] == 1


async def test_an_unsampled_request_keeps_only_a_compact_summary():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=0.0, exporter=exporter)

    state = await run_request(telemetry, request_id="r-2")

    assert exporter.traces == []
    assert state.trace_exported is False
    assert state.trace_id == trace_id_for("r-2")  # feedback may still create this trace later
    summary = telemetry.summaries.get("r-2")
    assert summary is not None and summary.answer is None
    assert summary.answer_chars == len(state.answer) > 0
    assert summary.question == "如何重設密碼？"
    assert [node.node for node in summary.nodes] == state.nodes_run
    assert summary.generations[0].total_tokens == PLANNER_USAGE.total_tokens


async def test_finish_hands_a_request_over_once():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=1.0, exporter=exporter)
    state = PipelineState(request_id="r-3", question="q")

    async def main():
        telemetry.begin(state)
        telemetry.finish(state)  # the telemetry node
        telemetry.finish(state)  # the runtime, when the run ends

    await asyncio.create_task(main())
    assert len(exporter.traces) == 1


async def test_finish_from_the_telemetry_node_hands_over_spans_the_loop_no_longer_touches():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=1.0, exporter=exporter)
    state = PipelineState(request_id="r-node", question="q")

    async def main():
        observer = telemetry.begin(state)
        assert observer is not None  # sampled: the rate is 1
        observer.node_started("telemetry")
        telemetry.finish(state)  # what the telemetry node calls
        observer.node_finished("telemetry", "default", 0.01)  # the engine, after the node returned
        report_generation(node="late", model="m", usage=None, started=0.0)

    await asyncio.create_task(main())
    [trace] = exporter.traces
    assert trace.status == "ok"
    assert trace.nodes[-1].ms is None and trace.generations == ()


async def test_the_record_does_not_leak_out_of_the_run_task():
    telemetry = Telemetry(sample_rate=1.0, exporter=FakeExporter())
    await run_request(telemetry, request_id="r-4")
    assert current_trace.get() is None
    report_generation(node="planner", model="m", usage=None, started=0.0)  # outside a run: nothing to record


async def test_a_cancelled_run_is_exported_with_the_running_node_failed():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=1.0, exporter=exporter)
    retriever = InMemoryRetriever(delay=30)
    graph = compile_default(retriever)
    state = PipelineState(request_id="r-5", question="如何重設密碼？")
    writer, _channel = make_writer()

    async def main():
        observer = telemetry.begin(state)
        try:
            await graph.run(state, writer, observer=observer)
        finally:
            telemetry.finish(state)

    task = asyncio.create_task(main())
    await until(lambda: retriever.calls)  # the tool executor is searching (for 30 s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [trace] = exporter.traces
    assert trace.status == "cancelled"
    assert trace.nodes[-1].node == "tool_executor" and trace.nodes[-1].ms is None  # ended with the request
    assert all(node.ms is not None for node in trace.nodes[:-1])


async def test_a_trace_dropped_with_the_queue_full_is_remembered_for_feedback():
    exporter = FakeExporter(accept=False)
    telemetry = Telemetry(sample_rate=1.0, exporter=exporter)
    state = await run_request(telemetry, request_id="r-6")

    assert state.trace_exported is False  # sampled, but it never reached the exporter
    telemetry.send_score(score_for("r-6"), trace_exported=state.trace_exported)
    [(score, trace)] = exporter.scores
    assert trace is not None and (trace.trace_id, trace.rebuilt_from) == (score.trace_id, "memory")


async def test_a_score_for_an_exported_trace_goes_alone():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=1.0, exporter=exporter)
    state = await run_request(telemetry, request_id="r-7")
    telemetry.send_score(score_for("r-7"), trace_exported=state.trace_exported)
    assert exporter.scores == [(score_for("r-7"), None)]


async def test_whether_a_score_brings_its_trace_follows_what_the_request_recorded_not_todays_rate():
    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=0.0, exporter=exporter)
    unsampled = await run_request(telemetry, request_id="r-rate-up")
    telemetry.sampler.set_rate(1.0)
    sampled = await run_request(telemetry, request_id="r-rate-down")
    telemetry.sampler.set_rate(0.0)

    telemetry.send_score(score_for("r-rate-up"), trace_exported=unsampled.trace_exported)
    telemetry.send_score(score_for("r-rate-down"), trace_exported=sampled.trace_exported)

    [(_up, up_trace), (_down, down_trace)] = exporter.scores
    assert up_trace is not None and up_trace.request_id == "r-rate-up"
    assert down_trace is None
    assert [trace.request_id for trace in exporter.traces] == ["r-rate-down"]


async def test_a_score_for_an_unsampled_request_elsewhere_uses_the_fallback_summary():
    from datetime import UTC, datetime

    from rag.telemetry import trace_summary_from_exchange

    exporter = FakeExporter()
    telemetry = Telemetry(sample_rate=0.0, exporter=exporter)
    fallback = trace_summary_from_exchange(
        request_id="r-8",
        question="q",
        answer_chars=12,
        finished_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        latency_ms=1500,
        usage={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    )
    telemetry.send_score(score_for("r-8"), trace_exported=False, fallback=fallback)
    [(_score, trace)] = exporter.scores
    assert trace is fallback
    assert (trace.rebuilt_from, trace.latency_ms, trace.usage) == ("messages", 1500.0, (3, 4, 7))


async def test_the_summary_store_is_bounded():
    telemetry = Telemetry(sample_rate=0.0, exporter=FakeExporter(), summary_limit=2)
    for request_id in ("a", "b", "c"):
        await run_request(telemetry, request_id=request_id)
    assert len(telemetry.summaries) == 2
    assert telemetry.summaries.get("a") is None and telemetry.summaries.get("c") is not None


def test_trace_ids_match_the_sdks_seeded_ids():
    from langfuse import Langfuse

    for request_id in ("r-1", "0f1e2d3c4b5a49688796a5b4c3d2e1f0"):
        assert trace_id_for(request_id) == Langfuse.create_trace_id(seed=request_id)
