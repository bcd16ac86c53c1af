"""`POST /api/v1/rag/ask/stream` and `/stream_chat`: SSE frames, refusals, disconnects, recording."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from channels.testing import ApplicationCommunicator

from chatbot.models import Conversation, Message
from chatbot.streaming import pending_records
from devtools.simulator.testing import SimulatorProcess
from tests.chatbot.helpers import (
    CANCELLED_WITHIN,
    EVENT_TIMEOUT,
    FIRST_EVENT_TIMEOUT,
    JSON_CONTENT,
    application,
    ask_body,
    http_scope,
    parse_sse,
    sse_request,
    sse_start,
    sse_until_answer_delta,
)
from tests.concurrency.llm_app import (
    FREED_WITHIN,
    STALLED_ANSWER,
    LLMApp,
    chat_stats,
    wait_slot_and_upstream_free,
)

pytestmark = pytest.mark.django_db(transaction=True)

STREAM = "/api/v1/rag/ask/stream"
STREAM_CHAT = "/api/v1/rag/ask/stream_chat"


async def test_frames_carry_the_seq_as_id_and_end_with_one_summary(recording_queries: list[int]) -> None:
    response = await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"))

    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    frames = response.frames()
    assert [frame_id for frame_id, _ in frames] == [event["seq"] for _, event in frames]
    assert [frame_id for frame_id, _ in frames] == list(range(1, len(frames) + 1))
    events = response.events()
    assert {e["request_id"] for e in events} == {response.headers["x-request-id"]}
    assert [e["channel"] for e in events].count("meta_summary") == 1
    assert events[-1]["channel"] == "meta_summary"
    assert not any(e["channel"] == "error" for e in events)
    assert events[-1]["sources"]
    assert "".join(e["delta"] for e in events if e["channel"] == "answer").strip()

    # Recorded once: the question and the answer, in a handful of queries.
    await pending_records()
    messages = [m async for m in Message.objects.order_by("id")]
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].status == "ok" and messages[1].backend == "chat"
    assert messages[1].request_id == response.headers["x-request-id"]
    assert await Conversation.objects.acount() == 1
    assert len(recording_queries) == 1
    # BEGIN, SELECT, SAVEPOINT, INSERT conversation, RELEASE, 2 x INSERT message, UPDATE, COMMIT
    assert recording_queries[0] <= 9, recording_queries


@pytest.mark.parametrize(("path", "backend"), [(STREAM, "responses"), (STREAM_CHAT, "chat")])
async def test_each_endpoint_sets_its_backend(path: str, backend: str) -> None:
    response = await sse_request(path, ask_body("如何重設密碼？", backend="chat" if backend == "responses" else "x"))
    summary = response.events()[-1]
    assert summary["channel"] == "meta_summary"
    assert summary["backend"] == backend  # the body cannot choose it


async def test_a_new_client_gets_the_cookie_and_can_continue_with_it() -> None:
    first = await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"))
    set_cookie = first.headers["set-cookie"]
    assert set_cookie.startswith("hc_client=") and "HttpOnly" in set_cookie and "SameSite=Lax" in set_cookie
    client_hex = set_cookie.split(";", 1)[0].split("=", 1)[1]
    conversation_id = first.events()[-1]["conversation_id"]
    await pending_records()

    cookie = (b"cookie", f"hc_client={client_hex}".encode())
    second = await sse_request(
        STREAM_CHAT,
        ask_body("Can you make it shorter?", conversation_id=conversation_id),
        headers=[JSON_CONTENT, cookie],
    )
    assert "set-cookie" not in second.headers
    summary = second.events()[-1]
    assert summary["conversation_id"] == conversation_id
    assert summary["intent"] == "conversation_followup"


BAD_BODIES = [
    pytest.param(b"{nope", "not valid JSON", id="invalid-json"),
    pytest.param(b"", "not valid JSON", id="empty-body"),
    pytest.param(b"\xc3\x28", "not UTF-8", id="not-utf8"),
    pytest.param(b"[1, 2]", "must be a JSON object", id="array"),
    pytest.param(ask_body(), "'question' is required", id="missing-question"),
    pytest.param(ask_body(""), "'question' is empty", id="empty-question"),
    pytest.param(ask_body(["a"]), "'question' must be a string, not list", id="list-question"),
    pytest.param(ask_body("x" * 2001), "the limit is 2000", id="too-long"),
    pytest.param(ask_body("hi", conversation_id=5), "'conversation_id' must be a string", id="number-conversation"),
    pytest.param(
        ask_body("hi", conversation_id=str(uuid.uuid4())), "unknown conversation_id", id="unknown-conversation"
    ),
    pytest.param(b'{"question": "x\\ud800y"}', "'question' contains a lone UTF-16 surrogate", id="surrogate"),
    pytest.param(b'{"question": "x\\u0000y"}', "'question' contains a NUL character", id="nul"),
]


@pytest.mark.parametrize(("body", "problem"), BAD_BODIES)
async def test_bad_requests_get_400_json_naming_the_problem_and_write_nothing(body: bytes, problem: str) -> None:
    response = await sse_request(STREAM, body)
    assert response.status == 400
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert problem in error["message"]
    await pending_records()
    assert await Message.objects.acount() == 0


@pytest.mark.parametrize(
    "headers",
    [pytest.param([], id="none"), pytest.param([(b"content-type", b"application/x-www-form-urlencoded")], id="form")],
)
async def test_a_body_not_declared_json_is_refused(headers: list) -> None:
    response = await sse_request(STREAM, ask_body("How do I reset my password?"), headers=headers)
    assert response.status == 415
    assert "Content-Type must be application/json" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", STREAM), ("GET", STREAM + "/abc"), ("POST", STREAM + "/abc/cancel"), ("GET", "/v1/models")],
)
async def test_a_host_outside_allowed_hosts_is_a_400_as_in_django_views(method: str, path: str) -> None:
    scope = http_scope(method, path, headers=[JSON_CONTENT])
    scope["headers"] = [(b"host", b"evil.example"), *scope["headers"][1:]]
    communicator = ApplicationCommunicator(application(), scope)
    await communicator.send_input({"type": "http.request", "body": ask_body("How do I reset my password?")})
    start = await communicator.receive_output(timeout=EVENT_TIMEOUT)
    body = await communicator.receive_output(timeout=EVENT_TIMEOUT)
    assert start["status"] == 400 and json.loads(body["body"])["error"]["code"] == "bad_request"
    await pending_records()
    assert await Message.objects.acount() == 0


async def test_get_is_not_allowed() -> None:
    response = await sse_request(STREAM, b"", method="GET")
    assert response.status == 405
    assert response.headers["allow"] == "POST"


async def test_an_oversized_body_is_refused_before_it_is_read_whole() -> None:
    communicator = await sse_start(STREAM, b"{" + b" " * 70_000, headers=[JSON_CONTENT])
    start = await communicator.receive_output(timeout=EVENT_TIMEOUT)
    assert start["status"] == 413


async def test_a_body_in_several_messages_is_joined() -> None:
    from tests.chatbot.helpers import application, http_scope

    body = ask_body("How do I reset my password?")
    communicator = ApplicationCommunicator(application(), http_scope("POST", STREAM, headers=[JSON_CONTENT]))
    await communicator.send_input({"type": "http.request", "body": body[:5], "more_body": True})
    await communicator.send_input({"type": "http.request", "body": body[5:], "more_body": False})
    start = await communicator.receive_output(timeout=FIRST_EVENT_TIMEOUT)
    assert start["status"] == 200
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=2)


async def test_a_disconnect_mid_stream_cancels_the_pipeline_promptly(
    slow_answers: None, opened_exchanges: list
) -> None:
    communicator = await sse_start(STREAM_CHAT, ask_body("How do I reset my password?"), headers=[JSON_CONTENT])
    received = await sse_until_answer_delta(communicator)

    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=EVENT_TIMEOUT)  # the consumer stopped
    run = opened_exchanges[0].run
    await run.wait(CANCELLED_WITHIN)
    assert run.done, "the pipeline must stop at once on the disconnect"
    assert run.terminal is not None and run.terminal["code"] == "cancelled"
    # What was sent before is well-formed and has no terminal event.
    assert all(e["channel"] not in ("meta_summary", "error") for _, e in parse_sse(received))

    await pending_records()
    assistant = await Message.objects.aget(role="assistant")
    assert assistant.status == "cancelled" and assistant.error_code == "cancelled"
    assert await Message.objects.acount() == 2


async def test_a_stream_that_breaks_off_still_ends_with_one_terminal(stream_breaks_after_first_answer: None) -> None:
    response = await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"))
    assert response.status == 200
    frames = response.frames()
    assert [frame_id for frame_id, _ in frames] == list(range(1, len(frames) + 1))
    events = response.events()
    assert events[-2]["channel"] == "answer"
    assert events[-1]["channel"] == "error" and events[-1]["code"] == "internal"
    assert {e["request_id"] for e in events} == {response.headers["x-request-id"]}


async def test_a_fast_busy_is_http_429_with_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    from rag.wiring import get_runtime

    runtime = get_runtime()
    deps = await runtime.deps()

    class RefuseAll:
        async def admit(self, rules: object) -> tuple[bool, float]:
            return False, 2.4

    monkeypatch.setattr(deps, "rate_limiter", RefuseAll())
    runtime.graph_cache.clear()  # the guard takes the limiter when the graph is compiled
    try:
        response = await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"))
    finally:
        monkeypatch.undo()
        runtime.graph_cache.clear()
    assert response.status == 429
    assert response.headers["retry-after"] == "3"
    error = response.json()["error"]
    assert error["code"] == "busy" and error["retry_after"] == 3
    assert error["request_id"] == response.headers["x-request-id"]
    await pending_records()
    assert await Message.objects.acount() == 0


# --- through the LLM simulator and the process concurrency manager -------------------------------------------


async def test_a_disconnect_mid_answer_frees_the_llm_slot_and_the_upstream_request_promptly(
    llm_app: LLMApp, app_sim: SimulatorProcess
) -> None:
    manager = await llm_app()
    await app_sim.afaults(fail_next=STALLED_ANSWER)
    communicator = await sse_start(STREAM_CHAT, ask_body("How do I reset my password?"), headers=[JSON_CONTENT])
    await sse_until_answer_delta(communicator)
    assert chat_stats(manager)["in_progress"] == 1, "the answer holds a chat slot while it streams"
    assert (await app_sim.astats())["running"] == 1

    await communicator.send_input({"type": "http.disconnect"})
    stats = await wait_slot_and_upstream_free(manager, app_sim, within=FREED_WITHIN)
    assert stats["total_acquired"] == stats["total_released"] == 2  # the plan and the answer
    await communicator.wait(timeout=EVENT_TIMEOUT)


async def test_a_full_llm_wait_queue_answers_busy_with_retry_after_and_counts_the_rejections(
    llm_app: LLMApp, app_sim: SimulatorProcess, settings: Any
) -> None:
    settings.RAG_DEGRADED_ANSWERS = False  # with it on, the refused answer comes from the passages (below)
    manager = await llm_app(limit_chat=1, max_waiters=0)
    await app_sim.afaults(fail_next=STALLED_ANSWER)
    holder = await sse_start(STREAM_CHAT, ask_body("How do I reset my password?"), headers=[JSON_CONTENT])
    await sse_until_answer_delta(holder)  # the one chat slot is taken until this answer ends

    response = await sse_request(STREAM_CHAT, ask_body("How do I change my email address?"))

    if response.status == 429:  # refused before the stream started
        error = response.json()["error"]
        assert error["code"] == "busy"
        assert response.headers["retry-after"] == str(error["retry_after"])
        assert int(response.headers["retry-after"]) >= 1
    else:
        assert response.status == 200
        terminal = response.events()[-1]
        assert (terminal["channel"], terminal["code"]) == ("error", "busy")
        assert terminal["retry_after"] >= 1
    stats = chat_stats(manager)
    # Both of its calls (the plan, which falls back to the rules, and the answer) were refused at once.
    assert (stats["total_rejected"], stats["total_timeout"]) == (2, 0)
    assert (await app_sim.astats())["attempts"] == 2, "a refused call must not reach the model"

    await holder.send_input({"type": "http.disconnect"})
    await wait_slot_and_upstream_free(manager, app_sim)
    await holder.wait(timeout=1)


async def test_with_the_llm_queue_full_the_answer_comes_from_the_passages_flagged_degraded(
    llm_app: LLMApp, app_sim: SimulatorProcess
) -> None:
    await llm_app(limit_chat=1, max_waiters=0)
    await app_sim.afaults(fail_next=STALLED_ANSWER)
    holder = await sse_start(STREAM_CHAT, ask_body("How do I reset my password?"), headers=[JSON_CONTENT])
    await sse_until_answer_delta(holder)  # the one chat slot is taken until this answer ends

    response = await sse_request(STREAM_CHAT, ask_body("How do I change my email address?"))

    assert response.status == 200
    events = response.events()
    terminal = events[-1]
    assert terminal["channel"] == "meta_summary" and terminal["degraded"] is True
    answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert answer.startswith("(The full assistant is unavailable right now") and "[1]" in answer
    stored = await Message.objects.aget(request_id=terminal["request_id"], role="assistant")
    assert (stored.degraded, stored.status, stored.content) == (True, "ok", answer)

    await holder.send_input({"type": "http.disconnect"})
    await holder.wait(timeout=1)
