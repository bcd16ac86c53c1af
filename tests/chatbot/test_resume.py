"""Resumable streams: a client that loses its connection mid-answer gets exactly the events it missed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from chatbot import replay
from chatbot.models import Message
from chatbot.streaming import pending_records
from tests.chatbot.helpers import (
    CANCELLED_WITHIN,
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
    ws_events,
)
from tests.fake_clock import FakeClock
from tests.waiting import until, until_async

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[replay.StreamRegistry]:
    yield replay.stream_registry_reset()
    replay.stream_registry_reset()


def resume_path(request_id: str) -> str:
    return f"/api/v1/rag/ask/stream/{request_id}"


async def sse_until_answer(cookie: tuple[bytes, bytes], **extra: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Start an SSE answer and read frames until the first answer delta; returns (communicator, events)."""
    communicator = await sse_start(STREAM_CHAT, ask_body(QUESTION, **extra), headers=[JSON_CONTENT, cookie])
    received = await sse_until_answer_delta(communicator)
    # A frame may be cut at a body boundary only at the end; keep the whole frames.
    whole = received[: received.rfind(b"\n\n") + 2]
    return communicator, [event for _id, event in parse_sse(whole)]


async def ws_until_answer(cookie: tuple[bytes, bytes], **extra: Any) -> tuple[WebsocketCommunicator, list[dict]]:
    communicator = ws_communicator(cookie)
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "ask", "question": QUESTION, **extra})
    events = [await communicator.receive_json_from(timeout=FIRST_EVENT_TIMEOUT)]
    while events[-1]["channel"] != "answer":
        events.append(await communicator.receive_json_from(timeout=EVENT_TIMEOUT))
    return communicator, events


# --- no event lost or repeated across a reconnect --------------------------------------------------------------


async def test_sse_resume_after_last_event_id_sends_exactly_the_missed_events(slow_answers: None) -> None:
    cookie = client_cookie()
    communicator, before = await sse_until_answer(cookie, on_disconnect="continue")
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=1)

    # Resumed while the answer is still streaming: the rest arrives live.
    last_id = str(before[-1]["seq"]).encode()
    after = await sse_request(
        resume_path(before[0]["request_id"]), b"", headers=[cookie, (b"last-event-id", last_id)], method="GET"
    )
    assert after.status == 200
    assert after.headers["content-type"].startswith("text/event-stream")
    assert after.headers["x-request-id"] == before[0]["request_id"]
    events = before + after.events()
    assert_whole_stream(events)
    assert events[-1]["channel"] == "meta_summary" and events[-1]["sources"]
    assert [frame_id for frame_id, _ in after.frames()] == [e["seq"] for e in after.events()]


async def test_sse_resume_takes_last_event_id_from_the_query_too() -> None:
    from channels.testing import ApplicationCommunicator

    from tests.chatbot.helpers import application, http_scope

    cookie = client_cookie()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    events = first.events()
    path = resume_path(events[0]["request_id"])
    by_header = await sse_request(path, b"", headers=[cookie, (b"last-event-id", b"3")], method="GET")
    assert by_header.events() == events[3:]

    # For clients that cannot set headers.
    scope = http_scope("GET", path, headers=[cookie], query=b"last_event_id=3")
    communicator = ApplicationCommunicator(application(), scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    assert (await communicator.receive_output(timeout=EVENT_TIMEOUT))["status"] == 200
    body = await sse_rest(communicator)
    assert [event for _id, event in parse_sse(body)] == events[3:]


async def test_ws_resume_on_a_new_socket_sends_exactly_the_missed_events(slow_answers: None) -> None:
    cookie = client_cookie()
    communicator, before = await ws_until_answer(cookie, on_disconnect="continue")
    await communicator.disconnect()

    second = ws_communicator(cookie)
    assert (await second.connect())[0]
    request_id = before[0]["request_id"]
    await second.send_json_to({"type": "resume", "request_id": request_id, "last_seq": before[-1]["seq"]})
    after = await ws_events(second)
    events = before + after
    assert_whole_stream(events)
    assert events[-1]["channel"] == "meta_summary"
    await second.receive_nothing()
    # A resume of a finished stream from the middle repeats nothing either.
    await second.send_json_to({"type": "resume", "request_id": request_id, "last_seq": 4})
    assert await ws_events(second) == events[4:]
    await second.disconnect()


async def test_a_resume_that_has_everything_gets_nothing() -> None:
    cookie = client_cookie()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    last = first.events()[-1]
    # 204 also tells an EventSource to stop reconnecting.
    done = await sse_request(
        resume_path(last["request_id"]),
        b"",
        headers=[cookie, (b"last-event-id", str(last["seq"]).encode())],
        method="GET",
    )
    assert done.status == 204 and done.body == b""

    communicator = ws_communicator(cookie)
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "resume", "request_id": last["request_id"], "last_seq": last["seq"]})
    await communicator.receive_nothing()
    await communicator.disconnect()


# --- refusals --------------------------------------------------------------------------------------------------


async def test_events_expire_after_the_retention_window() -> None:
    # This process's registry (no Redis copy: test_redis_keeps_events_for_the_window_only covers that one) on a clock
    # the test moves, so the window is crossed rather than slept through. The stream stamps its end with the real
    # monotonic clock, so the test's clock starts from the real time once the stream has ended (the terminal event
    # is stamped before it is sent).
    clock = FakeClock()
    replay._registry = replay.StreamRegistry(retention_seconds=300, clock=clock)
    cookie = client_cookie()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    request_id = first.events()[0]["request_id"]
    clock.now = time.monotonic()
    clock.advance(250)
    within = await sse_request(resume_path(request_id), b"", headers=[cookie, (b"last-event-id", b"2")], method="GET")
    assert within.status == 200

    clock.advance(51)  # over 300 s since the end
    expired = await sse_request(resume_path(request_id), b"", headers=[cookie, (b"last-event-id", b"2")], method="GET")
    assert expired.status == 410
    error = expired.json()["error"]
    assert error["code"] == "bad_request" and f"stream {request_id} expired" in error["message"]

    communicator = ws_communicator(cookie)
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "resume", "request_id": request_id, "last_seq": 2})
    event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
    assert event["channel"] == "error" and event["code"] == "bad_request" and "expired" in event["message"]
    assert event["request_id"] == request_id and event["seq"] == 3  # the terminal of the stream the client holds
    await communicator.disconnect()


async def test_another_clients_stream_is_refused_exactly_as_an_unknown_one() -> None:
    owner = client_cookie()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, owner])
    request_id = first.events()[0]["request_id"]
    unknown_id = uuid.uuid4().hex

    stranger = client_cookie()
    refused = await sse_request(resume_path(request_id), b"", headers=[stranger], method="GET")
    never_seen = await sse_request(resume_path(unknown_id), b"", headers=[stranger], method="GET")
    assert refused.status == never_seen.status == 410
    assert refused.json()["error"]["message"] == never_seen.json()["error"]["message"].replace(unknown_id, request_id)
    no_cookie = await sse_request(resume_path(request_id), b"", headers=[], method="GET")
    assert no_cookie.status == 410

    communicator = ws_communicator(stranger)
    assert (await communicator.connect())[0]
    answers = []
    for rid in (request_id, unknown_id):
        await communicator.send_json_to({"type": "resume", "request_id": rid, "last_seq": 0})
        event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
        answers.append((event["channel"], event["code"], event["message"].replace(rid, "<id>")))
    assert answers[0] == answers[1] and answers[0][1] == "bad_request"
    await communicator.receive_nothing()
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"type": "resume", "last_seq": 1}, "'request_id' must be"),
        ({"type": "resume", "request_id": "<script>", "last_seq": 1}, "'request_id' must be"),
        ({"type": "resume", "request_id": "abc", "last_seq": -1}, "'last_seq' must be a whole number"),
        ({"type": "resume", "request_id": "abc", "last_seq": "2"}, "'last_seq' must be a whole number"),
        ({"type": "ask", "question": "hi", "on_disconnect": "linger"}, "'on_disconnect' must be 'cancel' or"),
    ],
)
async def test_bad_resume_and_policy_fields_are_named(message: dict, problem: str) -> None:
    communicator = ws_communicator(client_cookie())
    assert (await communicator.connect())[0]
    await communicator.send_json_to(message)
    event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
    assert event["code"] == "bad_request" and problem in event["message"] and event["seq"] == 1
    await communicator.disconnect()


async def test_sse_refuses_a_bad_last_event_id_and_a_seq_beyond_the_stream() -> None:
    cookie = client_cookie()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    events = first.events()
    path = resume_path(events[0]["request_id"])
    bad = await sse_request(path, b"", headers=[cookie, (b"last-event-id", b"x1")], method="GET")
    assert bad.status == 400 and "Last-Event-ID must be" in bad.json()["error"]["message"]
    beyond = str(events[-1]["seq"] + 5).encode()
    too_far = await sse_request(path, b"", headers=[cookie, (b"last-event-id", beyond)], method="GET")
    assert too_far.status == 400 and "is beyond stream" in too_far.json()["error"]["message"]
    post = await sse_request(path, b"", headers=[cookie, JSON_CONTENT], method="POST")
    assert post.status == 405 and post.headers["allow"] == "GET"


async def test_a_stream_longer_than_the_bound_refuses_a_resume_from_dropped_events(slow_answers: None) -> None:
    # Slow answers: the client reading live keeps up with the ring; one coming back later finds the start gone.
    replay.stream_registry_reset(max_events=30)
    cookie = client_cookie()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    events = first.events()
    assert_whole_stream(events)
    assert len(events) > 40
    path = resume_path(events[0]["request_id"])
    refused = await sse_request(path, b"", headers=[cookie, (b"last-event-id", b"1")], method="GET")
    assert refused.status == 410 and "no longer kept" in refused.json()["error"]["message"]
    tail_from = str(events[-5]["seq"]).encode()
    tail = await sse_request(path, b"", headers=[cookie, (b"last-event-id", tail_from)], method="GET")
    assert tail.events() == events[-4:]


# --- the disconnect policy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("explicit", [True, False], ids=["cancel", "default"])
async def test_cancel_policy_frees_the_run_at_once_on_disconnect(
    slow_answers: None, opened_exchanges: list, explicit: bool
) -> None:
    extra = {"on_disconnect": "cancel"} if explicit else {}
    communicator, _before = await ws_until_answer(client_cookie(), **extra)
    await communicator.disconnect()
    run = opened_exchanges[0].run
    await run.wait(CANCELLED_WITHIN)
    assert run.done
    assert run.terminal is not None and run.terminal["code"] == "cancelled"


async def test_continue_policy_keeps_the_run_going_to_the_end(slow_answers: None, opened_exchanges: list) -> None:
    cookie = client_cookie()
    communicator, before = await sse_until_answer(cookie, on_disconnect="continue")
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=EVENT_TIMEOUT)  # the consumer stopped: a `cancel` answer would be cancelled now
    run = opened_exchanges[0].run
    await run.wait(10.0)
    # It ran on to its own end, not to a `cancelled` error.
    assert run.terminal is not None and run.terminal["channel"] == "meta_summary", (
        "a `continue` answer must not stop with its transport"
    )
    stream = replay.stream_registry().local(before[0]["request_id"])
    assert stream is not None
    await stream.wait()
    await pending_records()
    assistant = await Message.objects.aget(role="assistant")
    assert assistant.status == "ok" and assistant.request_id == before[0]["request_id"]

    # The whole answer is there for the client when it comes back.
    after = await sse_request(
        resume_path(before[0]["request_id"]), b"", headers=[cookie, (b"last-event-id", b"0")], method="GET"
    )
    assert_whole_stream(after.events())
    answer = "".join(e["delta"] for e in after.events() if e["channel"] == "answer")
    assert answer == assistant.content


async def test_sse_cancel_endpoint_stops_a_continue_answer(slow_answers: None) -> None:
    cookie = client_cookie()
    communicator, before = await sse_until_answer(cookie, on_disconnect="continue")
    request_id = before[0]["request_id"]
    stranger = await sse_request(resume_path(request_id) + "/cancel", b"{}", headers=[JSON_CONTENT, client_cookie()])
    # Another client's answer is not theirs to stop, nor to learn about: the same 404 as an unknown request.
    assert stranger.status == 404 and stranger.json()["error"]["request_id"] == request_id
    not_json = await sse_request(resume_path(request_id) + "/cancel", b"{}", headers=[cookie])
    assert not_json.status == 415

    cancelled = await sse_request(resume_path(request_id) + "/cancel", b"{}", headers=[JSON_CONTENT, cookie])
    assert cancelled.status == 202 and cancelled.json() == {"request_id": request_id, "status": "cancelling"}
    rest = await sse_rest(communicator)
    terminal = json.loads(rest.rstrip().rsplit(b"data: ", 1)[1])
    assert terminal["channel"] == "error" and terminal["code"] == "cancelled"
    await communicator.wait(timeout=1)

    again = await sse_request(resume_path(request_id) + "/cancel", b"{}", headers=[JSON_CONTENT, cookie])
    assert again.status == 404 and request_id in again.json()["error"]["message"]
    unknown_id = uuid.uuid4().hex
    unknown = await sse_request(resume_path(unknown_id) + "/cancel", b"{}", headers=[JSON_CONTENT, cookie])
    assert unknown.status == 404 and unknown.json()["error"]["request_id"] == unknown_id


async def test_ws_cancel_reaches_a_resumed_stream(slow_answers: None) -> None:
    cookie = client_cookie()
    communicator, before = await ws_until_answer(cookie, on_disconnect="continue")
    await communicator.disconnect()
    second = ws_communicator(cookie)
    assert (await second.connect())[0]
    request_id = before[0]["request_id"]
    await second.send_json_to({"type": "resume", "request_id": request_id, "last_seq": before[-1]["seq"]})
    await second.receive_json_from(timeout=EVENT_TIMEOUT)
    await second.send_json_to({"type": "cancel", "request_id": request_id})
    events = await ws_events(second)
    assert events[-1]["channel"] == "error" and events[-1]["code"] == "cancelled"
    await second.disconnect()


# --- the shared copy in Redis -------------------------------------------------------------------------------------


@pytest.fixture
def redis_store() -> Iterator[replay.RedisStreamStore]:
    redis = pytest.importorskip("redis")
    url = "redis://127.0.0.1:6379/1"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    except (redis.RedisError, OSError):
        pytest.skip("Redis does not answer on 127.0.0.1:6379")
    yield replay.RedisStreamStore(url, f"test-replay-{uuid.uuid4().hex[:8]}", retention_seconds=300, max_events=10_000)


async def test_another_worker_resumes_through_redis(slow_answers: None, redis_store: replay.RedisStreamStore) -> None:
    # This process runs the answer (its registry writes to Redis); a second registry with the same store and no
    # local copy stands for another worker.
    replay._registry = replay.StreamRegistry(store=redis_store)
    other_worker = replay.StreamRegistry(store=redis_store)
    cookie = client_cookie()
    communicator, before = await ws_until_answer(cookie, on_disconnect="continue")
    await communicator.disconnect()
    client_id = "anon:" + cookie[1].decode().split("=", 1)[1]
    request_id = before[0]["request_id"]

    with pytest.raises(replay.ResumeRefused, match="expired or is unknown"):  # as an unknown id is answered
        await other_worker.resume(request_id, client_id="anon:" + uuid.uuid4().hex, after_seq=0)
    resumption = await other_worker.resume(request_id, client_id=client_id, after_seq=before[-1]["seq"])
    assert resumption.local is None
    after = [event async for event in resumption.events]
    assert_whole_stream(before + after)
    assert after[-1]["channel"] == "meta_summary"

    await redis_store.discard(request_id)
    with pytest.raises(replay.ResumeRefused, match="expired"):
        await other_worker.resume(request_id, client_id=client_id, after_seq=0)


async def test_redis_keeps_events_for_the_window_only(redis_store: replay.RedisStreamStore) -> None:
    # Redis expires the keys on its own clock, so the window is real: long enough to look at the keys on a loaded
    # machine, short enough to see them go.
    redis_store.retention_seconds = 3.0
    replay._registry = replay.StreamRegistry(store=redis_store, retention_seconds=3.0)
    cookie = client_cookie()
    loop = asyncio.get_running_loop()
    asked_at = loop.time()
    first = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    request_id = first.events()[0]["request_id"]
    last = first.events()[-1]
    await until_async(lambda: redis_store.last_event(request_id), lambda event: event == last)  # the last batch
    # The window starts at that last write: every key is set to expire the retention later (less what has passed,
    # at most the time since the question was asked, however slow the machine).
    for key in redis_store._keys(request_id):
        left = await redis_store._redis().pttl(key)
        assert 3000 - (loop.time() - asked_at) * 1000 <= left <= 3000
    await until_async(lambda: redis_store.owner(request_id), lambda owner: owner is None, within=10.0)
    # This worker's own copy goes the same retention after the terminal event (its clock, not Redis's).
    await until(lambda: replay.stream_registry().local(request_id) is None, within=10.0)
    expired = await sse_request(resume_path(request_id), b"", headers=[cookie], method="GET")
    assert expired.status == 410
