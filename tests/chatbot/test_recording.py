"""The recording thread keeps its database connection, replaces a broken one, and closes it when told to."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.db import connections

from chatbot.models import Message
from chatbot.recording import ExchangeRecorder
from chatbot.services import exchange_record
from tests.fake_clock import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[ExchangeRecorder, FakeClock]]:
    clock = FakeClock(start=0.0)
    recorder = ExchangeRecorder(idle_check_seconds=30.0, clock=clock)
    yield recorder, clock
    await recorder.aclose()


async def record(recorder: ExchangeRecorder, answer: str) -> Any:
    return await recorder.run(
        exchange_record,
        conversation_id=str(uuid.uuid4()),
        client_id="c1",
        question="q?",
        answer=answer,
        request_id=uuid.uuid4().hex,
        status="ok",
    )


def thread_connection() -> Any:
    return connections["default"]


def break_connection() -> None:
    """Close the driver's connection behind Django's back, as a server restart or a proxy timeout would."""
    connections["default"].connection.close()


async def test_answers_are_recorded_on_one_kept_connection(recorder: tuple[ExchangeRecorder, FakeClock]) -> None:
    rec, clock = recorder
    await record(rec, "one")
    first = await rec.run(thread_connection)
    clock.now += 60.0  # idle long enough to be checked: a healthy connection is kept
    await record(rec, "two")
    assert await rec.run(thread_connection) is first
    assert first.connection is not None
    assert rec.connections_opened == 1
    answers = [content async for content in Message.objects.filter(role="assistant").values_list("content", flat=True)]
    assert sorted(answers) == ["one", "two"]


async def test_a_connection_broken_while_idle_is_replaced_before_the_next_write(
    recorder: tuple[ExchangeRecorder, FakeClock],
) -> None:
    rec, clock = recorder
    await record(rec, "before")
    await rec.run(break_connection)
    clock.now += 60.0
    await record(rec, "after")
    assert rec.connections_opened == 2
    assert await Message.objects.filter(role="assistant", content="after").aexists()


async def test_a_write_that_fails_on_a_broken_connection_drops_it_and_the_next_write_succeeds(
    recorder: tuple[ExchangeRecorder, FakeClock],
) -> None:
    rec, _clock = recorder
    await record(rec, "before")
    await rec.run(break_connection)  # not idle long enough to be checked: the write finds out
    with pytest.raises(Exception):  # noqa: B017 (each driver names a closed connection's error its own way)
        await record(rec, "lost")
    await record(rec, "after")
    assert rec.connections_opened == 2
    assert await Message.objects.filter(role="assistant", content="after").aexists()
    assert not await Message.objects.filter(role="assistant", content="lost").aexists()


async def test_close_closes_the_kept_connection(recorder: tuple[ExchangeRecorder, FakeClock]) -> None:
    rec, _clock = recorder
    await record(rec, "one")
    wrapper = await rec.run(thread_connection)
    assert wrapper.connection is not None
    await rec.aclose()
    assert wrapper.connection is None
    await record(rec, "two")  # a later write starts a new thread with a new connection
    assert rec.connections_opened == 2


async def test_writes_beyond_the_bound_are_refused() -> None:
    rec = ExchangeRecorder(max_pending=0)
    with pytest.raises(RuntimeError, match="already waiting"):
        await rec.run(thread_connection)
    await rec.aclose()
