"""The recording thread keeps its database connection, replaces a broken one, closes it when told to, and bounds
its calls: a call waits for a place and for the thread at most `queue_timeout`, is never run once past it, and once
started is reported by its real outcome."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from django.db import connections

from chatbot.models import Message
from chatbot.recording import ExchangeRecorder, OutcomeUnknown, RecorderBusy
from chatbot.services import exchange_record
from tests.fake_clock import FakeClock
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)
# Short, so the bounded waits end soon; long enough for the thread, started beforehand (`warm`), to take a held
# write up within it on a machine running two copies of the suite.
QUEUE_TIMEOUT = 1.0


async def warm(rec: ExchangeRecorder) -> ExchangeRecorder:
    """The recording thread started and its connection open, so taking the next call up is a queue hop."""
    await rec.run(lambda: None)
    return rec


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[ExchangeRecorder, FakeClock]]:
    clock = FakeClock(start=0.0)
    recorder = ExchangeRecorder(idle_check_seconds=30.0, clock=clock)
    yield recorder, clock
    await recorder.aclose()


class Held:
    """An exchange write that holds the recording thread from when it starts until the test lets it go."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()

    def __call__(self, **kwargs: Any) -> Message:
        self.started.set()
        self.go.wait(5.0)
        try:
            return exchange_record(**kwargs)
        finally:
            self.done.set()


@pytest.fixture
async def make_recorder() -> AsyncIterator[Callable[..., ExchangeRecorder]]:
    made: list[ExchangeRecorder] = []

    def make(**options: Any) -> ExchangeRecorder:
        made.append(ExchangeRecorder(**options))
        return made[-1]

    yield make
    for recorder in made:
        await recorder.aclose()


@pytest.fixture
def held() -> Iterator[Held]:
    write = Held()
    yield write
    write.go.set()  # a test that failed half-way does not leave the thread held


async def record(recorder: ExchangeRecorder, answer: str, fn: Callable[..., Any] = exchange_record) -> Any:
    return await recorder.run(
        fn,
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


async def test_a_call_past_max_pending_waits_for_a_place_and_then_runs(
    make_recorder: Callable[..., ExchangeRecorder], held: Held
) -> None:
    rec = make_recorder(max_pending=1)
    first = asyncio.create_task(record(rec, "first", held))
    await until(held.started.is_set)
    second = asyncio.create_task(record(rec, "second"))
    await asyncio.sleep(0)  # the second call's first step: where it used to be refused at once
    assert not second.done()
    held.go.set()
    assert (await first).content == "first"
    assert (await second).content == "second"


async def test_a_call_past_max_pending_fails_after_queue_timeout_without_running(
    make_recorder: Callable[..., ExchangeRecorder], held: Held
) -> None:
    rec = await warm(make_recorder(max_pending=1, queue_timeout=QUEUE_TIMEOUT))
    first = asyncio.create_task(record(rec, "first", held))
    await until(held.started.is_set)
    ran: list[str] = []
    loop = asyncio.get_running_loop()
    asked = loop.time()
    with pytest.raises(RecorderBusy, match="no place"):
        await rec.run(lambda: ran.append("refused"))
    assert loop.time() - asked >= QUEUE_TIMEOUT - 0.01  # it waited for a place first (give or take the loop's timer)
    held.go.set()
    assert (await first).content == "first"
    await rec.run(lambda: None)  # the thread has run all it was given
    assert ran == []


async def test_a_started_write_that_outlasts_the_queue_bound_gets_its_real_outcome(
    make_recorder: Callable[..., ExchangeRecorder], held: Held
) -> None:
    rec = await warm(make_recorder(queue_timeout=QUEUE_TIMEOUT))
    slow = asyncio.create_task(record(rec, "slow", held))
    await until(held.started.is_set)
    ran: list[str] = []
    # Queued behind the held write, this call's caller gives up at its deadline, which comes after the slow one's.
    with pytest.raises(RecorderBusy, match="did not take the call up"):
        await rec.run(lambda: ran.append("queued"))
    held.go.set()
    assert (await slow).content == "slow"  # not reported as "not written": it was
    await rec.run(lambda: None)
    assert ran == []  # the call given up on never ran


async def test_a_call_the_thread_takes_up_past_its_deadline_does_not_write(
    make_recorder: Callable[..., ExchangeRecorder], held: Held
) -> None:
    clock = FakeClock(start=0.0)
    rec = make_recorder(queue_timeout=30.0, clock=clock)
    first = asyncio.create_task(record(rec, "first", held))
    await until(held.started.is_set)
    late = asyncio.create_task(record(rec, "late"))
    await asyncio.sleep(0)  # its first step: queued for the thread, its caller waiting up to 30 s (loop time)
    clock.advance(31.0)  # the thread takes it up past its deadline, before its caller has given up
    held.go.set()
    assert (await first).content == "first"  # started in time: written
    with pytest.raises(RecorderBusy, match="waited more than"):
        await late
    assert not await Message.objects.filter(content="late").aexists()


async def test_a_started_write_past_the_outcome_bound_is_reported_unknown_not_failed(
    make_recorder: Callable[..., ExchangeRecorder], held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    rec = await warm(make_recorder(queue_timeout=QUEUE_TIMEOUT, outcome_timeout=0.05))
    with caplog.at_level(logging.WARNING, logger="chatbot.recording"):
        with pytest.raises(OutcomeUnknown):
            await record(rec, "late", held)
        assert "outcome is unknown" in caplog.text
        held.go.set()
        await until(lambda: "has ended: done" in caplog.text)  # and once it ends, what became of it
    assert await Message.objects.filter(role="assistant", content="late").aexists()  # it did commit after all
