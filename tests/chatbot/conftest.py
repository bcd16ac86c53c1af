"""Fixtures of the chat transport tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chatbot import streaming, summaries
from chatbot.recording import exchange_recorder
from rag.events import Event, StreamWriter
from rag.runtime import PipelineRun

# The app wired to the LLM simulator (`llm_app`, `app_sim`, one simulator per run), for every transport's tests.
from tests.concurrency.llm_app import (  # noqa: F401 - importing the *_fixture names registers the fixtures
    app_llm_simulator_fixture,
    app_sim_fixture,
    llm_app_fixture,
)


@pytest.fixture
def slow_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answer deltas 20 ms apart, so a test can act while an answer is still streaming."""
    real_answer = StreamWriter.answer

    async def answer(self: StreamWriter, node: str, delta: str) -> None:
        await asyncio.sleep(0.02)
        await real_answer(self, node, delta)

    monkeypatch.setattr(StreamWriter, "answer", answer)


@pytest.fixture
def recording_queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Queries of each exchange write, counted on the thread that runs it."""
    counts: list[int] = []
    real_record = streaming.exchange_record

    def counted(**kwargs: Any) -> Any:
        with CaptureQueriesContext(connection) as queries:
            result = real_record(**kwargs)
        counts.append(len(queries.captured_queries))
        return result

    monkeypatch.setattr(streaming, "exchange_record", counted)
    yield counts


@pytest.fixture
def opened_exchanges(monkeypatch: pytest.MonkeyPatch) -> list[streaming.ChatExchange]:
    """Every exchange the consumers open, so a test can look at its pipeline run."""
    from chatbot.consumers import sse, ws

    opened: list[streaming.ChatExchange] = []
    real_open = streaming.exchange_open

    async def spy(ask: streaming.AskInput) -> streaming.ChatExchange:
        exchange = await real_open(ask)
        opened.append(exchange)
        return exchange

    monkeypatch.setattr(sse, "exchange_open", spy)
    monkeypatch.setattr(ws, "exchange_open", spy)
    return opened


@pytest.fixture
def stream_breaks_after_first_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's event stream fails right after its first answer delta (as an idle timeout would)."""
    real_events = PipelineRun.events

    async def events(self: PipelineRun) -> AsyncIterator[Event]:
        async with contextlib.aclosing(real_events(self)) as inner:
            async for event in inner:
                yield event
                if event["channel"] == "answer":
                    raise TimeoutError("no event within the idle timeout")

    monkeypatch.setattr(PipelineRun, "events", events)


@pytest.fixture(autouse=True)
async def _exchange_writes_finish() -> Any:
    """Every exchange a test started is recorded before the test database is flushed.

    A cancelled answer is written by a task of its own after the transport has gone; a flush racing that write
    fails with "database table is locked" and leaves rows for the next test. So is the conversation summary written
    after it (by the same thread). The recording thread's kept connection is then closed, as a stopping worker
    closes it: the test database can be dropped.
    """
    yield
    await streaming.pending_records()
    await summaries.pending_summaries(max_wait=5.0)
    await exchange_recorder().aclose()
