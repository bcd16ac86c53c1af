"""How a reported LLM call and a rebuilt exchange become records: token counts, clocks, the finished guard."""

from datetime import UTC, datetime

import pytest

from rag.state import Usage
from rag.telemetry.record import (
    GenerationRecord,
    TraceRecord,
    current_trace,
    report_generation,
    trace_summary_from_exchange,
)


@pytest.fixture
def record():
    record = TraceRecord("r-record", "t" * 32, sampled=True)
    token = current_trace.set(record)
    yield record
    current_trace.reset(token)


def test_a_call_with_usage_and_clocks_becomes_one_generation(record):
    report_generation(
        node="planner",
        model="m-1",
        usage=Usage(input_tokens=7, output_tokens=3, total_tokens=11),
        started=1.5,
        ended=2.25,
        first_token_at=1.75,
        operation="stream",
        error="timeout",
    )

    assert record.generations == [
        GenerationRecord(
            node="planner",
            model="m-1",
            input_tokens=7,
            output_tokens=3,
            total_tokens=11,
            start_ns=1_500_000_000,
            end_ns=2_250_000_000,
            first_token_ns=1_750_000_000,
            operation="stream",
            error="timeout",
        )
    ]


def test_a_usage_mapping_without_a_total_counts_input_plus_output(record):
    report_generation(node="n", model="m", usage={"input_tokens": 5, "output_tokens": 4}, started=1.0, ended=1.0)
    report_generation(node="n", model="m", usage={}, started=1.0, ended=1.0)

    first, second = record.generations
    assert (first.input_tokens, first.output_tokens, first.total_tokens) == (5, 4, 9)
    assert (second.input_tokens, second.output_tokens, second.total_tokens) == (0, 0, 0)


def test_a_call_without_usage_or_end_counts_nothing_and_ends_now(record):
    report_generation(node="n", model="m", usage=None, started=0.0)

    [generation] = record.generations
    assert (generation.input_tokens, generation.output_tokens, generation.total_tokens) == (0, 0, 0)
    assert generation.end_ns >= record.start_ns and generation.first_token_ns is None
    assert (generation.operation, generation.error) == ("", "")


def test_a_finished_record_takes_no_more_generations(record):
    record.finished = True
    report_generation(node="n", model="m", usage=None, started=0.0)
    assert record.generations == []


def test_a_rebuilt_summary_keeps_the_stored_usage_as_it_is():
    finished_at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    summary = trace_summary_from_exchange(
        request_id="r-x",
        question="q" * 600,
        answer_chars=12,
        finished_at=finished_at,
        latency_ms=250,
        usage={"input_tokens": 5, "output_tokens": 4},
    )
    empty = trace_summary_from_exchange(
        request_id="r-y", question="q", answer_chars=0, finished_at=finished_at, latency_ms=None
    )

    assert summary.usage == (5, 4, 0)  # a stored total is reported, never recomputed
    assert summary.end_ns - summary.start_ns == 250_000_000 and len(summary.question) == 500
    assert empty.usage == (0, 0, 0) and empty.start_ns == empty.end_ns
