"""Draining a worker (chatbot.drain), in process: new asks refused so a proxy retries elsewhere, live answers
finish within the window, whatever is left ends with a terminal `unavailable` (with `retry_after`) and is recorded.

The signal handling under daphne and the process's exit are tested with real daphne processes
(tests/chatbot/test_drain_daphne.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from channels.testing import ApplicationCommunicator, WebsocketCommunicator

from chatbot import drain, lifecycle, replay
from chatbot.models import Message
from rag.events import Event, StreamWriter
from tests.chatbot.helpers import (
    EVENT_TIMEOUT,
    FIRST_EVENT_TIMEOUT,
    JSON_CONTENT,
    QUESTION,
    STREAM_CHAT,
    ask_body,
    assert_whole_stream,
    client_cookie,
    parse_sse,
    sse_request,
    sse_rest,
    sse_start,
    sse_until_answer_delta,
    ws_communicator,
)
from tests.fake_clock import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def serving() -> Iterator[None]:
    replay.stream_registry_reset()
    drain.reset_for_tests()
    yield
    drain.reset_for_tests()
    replay.stream_registry_reset()


@pytest.fixture
def answers_held(monkeypatch: pytest.MonkeyPatch) -> Iterator[asyncio.Event]:
    """Each answer's deltas after its first wait for this event (set by the test), so an answer is still streaming
    when the worker drains."""
    flowing = asyncio.Event()
    started: set[str] = set()
    real_answer = StreamWriter.answer

    async def answer(self: StreamWriter, node: str, delta: str) -> None:
        if self.request_id in started:
            await flowing.wait()
        started.add(self.request_id)
        await real_answer(self, node, delta)

    monkeypatch.setattr(StreamWriter, "answer", answer)
    yield flowing
    flowing.set()  # whatever still waits ends


def drain_started() -> asyncio.Event:
    """Set once the drain has read its clock and started: its window runs from that reading."""
    started = asyncio.Event()
    lifecycle.on_drain(started.set)
    return started


async def two_answers_streaming() -> tuple[ApplicationCommunicator, bytes, WebsocketCommunicator, list[Event]]:
    """An SSE answer and a WebSocket answer, each past its first answer delta: (SSE, its body so far, socket, its
    events so far)."""
    sse = await sse_start(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, client_cookie()])
    first = await sse_until_answer_delta(sse)
    ws = ws_communicator(client_cookie())
    assert (await ws.connect())[0]
    await ws.send_json_to({"type": "ask", "question": QUESTION})
    ws_events = [await ws.receive_json_from(timeout=FIRST_EVENT_TIMEOUT)]
    while ws_events[-1]["channel"] != "answer":
        ws_events.append(await ws.receive_json_from(timeout=EVENT_TIMEOUT))
    return sse, first, ws, ws_events


async def drained(
    draining: asyncio.Future[drain.DrainReport],
    sse: ApplicationCommunicator,
    ws: WebsocketCommunicator,
    ws_events: list[Event],
) -> tuple[drain.DrainReport, bytes]:
    """The drain's report and the SSE body's rest, once both answers have ended (`ws_events` then ends too)."""
    report, sse_body = await asyncio.gather(asyncio.wait_for(draining, FIRST_EVENT_TIMEOUT), sse_rest(sse))
    while ws_events[-1]["channel"] not in ("meta_summary", "error"):
        ws_events.append(await ws.receive_json_from(timeout=EVENT_TIMEOUT))
    return report, sse_body


async def recorded(request_id: str) -> Message:
    from asgiref.sync import sync_to_async

    return await sync_to_async(Message.objects.get)(request_id=request_id, role="assistant")


# --- refusals ----------------------------------------------------------------------------------------------------


async def test_a_draining_worker_refuses_a_new_sse_ask_with_503_and_retry_after() -> None:
    lifecycle.start_drain(30.0)
    response = await sse_request(STREAM_CHAT, ask_body(QUESTION))
    assert response.status == 503
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["code"] == "unavailable" and error["retry_after"] == 1
    assert "shutting down" in error["message"]


async def test_a_draining_worker_closes_a_new_websocket_with_4012() -> None:
    lifecycle.start_drain(30.0)
    communicator = ws_communicator(client_cookie())
    connected, _ = await communicator.connect()
    assert connected  # accepted, then closed: a browser sees the close code, not a failed handshake
    assert await communicator.receive_output(timeout=EVENT_TIMEOUT) == {"type": "websocket.close", "code": 4012}
    await communicator.disconnect()


async def test_an_ask_on_an_open_websocket_gets_unavailable_then_the_close() -> None:
    communicator = ws_communicator(client_cookie())
    assert (await communicator.connect())[0]
    lifecycle.start_drain(30.0)
    await communicator.send_json_to({"type": "ask", "question": QUESTION})
    event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
    assert (event["channel"], event["code"], event["retry_after"], event["seq"]) == ("error", "unavailable", 1, 1)
    assert await communicator.receive_output(timeout=EVENT_TIMEOUT) == {"type": "websocket.close", "code": 4012}
    await communicator.disconnect()


# --- live answers --------------------------------------------------------------------------------------------


async def test_live_answers_finish_within_the_window_and_the_drain_ends_with_them(
    answers_held: asyncio.Event,
) -> None:
    sse, first, ws, ws_events = await two_answers_streaming()
    # The drain's clock never moves, so its window never closes: the drain can only end because the answers did.
    draining = asyncio.ensure_future(drain.drain(30.0, clock=FakeClock()))
    await drain_started().wait()
    answers_held.set()
    report, sse_body = await drained(draining, sse, ws, ws_events)

    # Both answers ran to their end, and the drain did not wait for the window once they had.
    assert report.seconds == 0.0
    assert (report.finished, report.interrupted, report.cancelled) == (2, 0, 0)
    sse_events = [event for _id, event in parse_sse(first + sse_body)]
    for events in (sse_events, ws_events):
        assert_whole_stream(events)
        assert events[-1]["channel"] == "meta_summary"
        assert (await recorded(events[0]["request_id"])).status == "ok"
    # The socket is closed for the client to reconnect elsewhere.
    assert await ws.receive_output(timeout=EVENT_TIMEOUT) == {"type": "websocket.close", "code": 4012}
    await ws.disconnect()


async def test_what_still_runs_when_the_window_closes_ends_with_unavailable_and_is_recorded(
    answers_held: asyncio.Event,
) -> None:
    sse, first, ws, ws_events = await two_answers_streaming()
    clock = FakeClock()
    draining = asyncio.ensure_future(drain.drain(0.5, clock=clock))
    await drain_started().wait()
    assert not drain.window_closed()  # the answers are held: they are still running, and the drain waits
    clock.advance(0.5)  # the window passes
    report, sse_body = await drained(draining, sse, ws, ws_events)

    assert report.seconds == 0.5
    assert report.interrupted == 2
    sse_events = [event for _id, event in parse_sse(first + sse_body)]
    for events in (sse_events, ws_events):
        assert_whole_stream(events)
        terminal = events[-1]
        assert (terminal["channel"], terminal["code"], terminal["retry_after"]) == ("error", "unavailable", 1)
        message = await recorded(terminal["request_id"])
        assert (message.status, message.error_code) == ("failed", "unavailable")
    assert await ws.receive_output(timeout=EVENT_TIMEOUT) == {"type": "websocket.close", "code": 4012}
    await ws.disconnect()
