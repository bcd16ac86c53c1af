"""`ws/chat/`: ask and cancel over a WebSocket on the full ASGI application."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from chatbot.models import Conversation, Message
from chatbot.streaming import pending_records
from devtools.simulator.testing import SimulatorProcess
from tests.chatbot.helpers import (
    CANCELLED_WITHIN,
    EVENT_TIMEOUT,
    FIRST_EVENT_TIMEOUT,
    application,
    assert_whole_stream,
    client_cookie,
    ws_communicator,
    ws_events,
)
from tests.concurrency.llm_app import (
    FREED_WITHIN,
    STALLED_ANSWER,
    LLMApp,
    chat_stats,
    wait_slot_and_upstream_free,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def connected(*headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    communicator = ws_communicator(*headers)
    ok, _ = await communicator.connect()
    assert ok
    return communicator


def assert_one_stream(events: list[dict]) -> None:
    assert_whole_stream(events)
    assert all(e["source"] == "ask_stream" for e in events)


async def test_ask_streams_every_event_in_order_and_ends_with_a_summary_citing_the_corpus() -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    events = await ws_events(communicator)

    assert_one_stream(events)
    assert events[0]["channel"] == "status" and events[0]["stage"] == "start"
    stages = {(e["node"], e["stage"]) for e in events if e["channel"] == "status"}
    assert ("guard", "start") in stages and ("guard", "end") in stages
    answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert answer.strip()
    summary = events[-1]
    assert summary["channel"] == "meta_summary"
    assert summary["backend"] == "chat"
    assert summary["sources"], "the answer cites the demo corpus"
    assert any("password" in s["doc_id"] for s in summary["sources"])
    await communicator.receive_nothing()
    await communicator.disconnect()
    await pending_records()
    assert await Message.objects.acount() == 2


async def test_backend_is_taken_from_the_message() -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "如何重設密碼？", "backend": "responses"})
    events = await ws_events(communicator)
    assert events[-1]["channel"] == "meta_summary"
    assert events[-1]["backend"] == "responses"
    assert events[-1]["language"] == "zh-hant"
    await communicator.disconnect()


async def test_a_second_turn_uses_the_conversation_history() -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    first = await ws_events(communicator)
    conversation_id = first[-1]["conversation_id"]
    await pending_records()  # the first turn must be stored before the second reads the history

    await communicator.send_json_to(
        {"type": "ask", "question": "Can you make it shorter?", "conversation_id": conversation_id}
    )
    second = await ws_events(communicator)
    assert_one_stream(second)
    assert second[0]["request_id"] != first[0]["request_id"]
    assert second[-1]["channel"] == "meta_summary"
    assert second[-1]["conversation_id"] == conversation_id
    assert second[-1]["intent"] == "conversation_followup"
    await communicator.disconnect()
    await pending_records()
    assert await Message.objects.filter(conversation_id=conversation_id).acount() == 4


async def test_cancel_mid_stream_ends_with_cancelled(slow_answers: None, opened_exchanges: list) -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    events: list[dict[str, Any]] = []
    while not any(e["channel"] == "answer" for e in events):
        events.append(await communicator.receive_json_from(timeout=20))
    await communicator.send_json_to({"type": "cancel", "request_id": events[0]["request_id"]})
    events += await ws_events(communicator)

    assert_one_stream(events)
    assert events[-1]["channel"] == "error" and events[-1]["code"] == "cancelled"
    assert opened_exchanges[0].run.done
    await communicator.receive_nothing()
    await pending_records()
    assistant = await Message.objects.aget(role="assistant")
    assert assistant.status == "cancelled"
    await communicator.disconnect()


async def test_cancel_right_after_ask_still_ends_with_cancelled(slow_answers: None) -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    await communicator.send_json_to({"type": "cancel"})  # before any event: the pipeline may not have started
    events = await ws_events(communicator)
    assert_one_stream(events)
    assert events[-1]["channel"] == "error" and events[-1]["code"] == "cancelled"
    await communicator.disconnect()


async def test_a_stream_that_breaks_off_still_ends_with_one_terminal(stream_breaks_after_first_answer: None) -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    events = await ws_events(communicator)
    assert_one_stream(events)
    assert events[-2]["channel"] == "answer"
    assert events[-1]["channel"] == "error" and events[-1]["code"] == "internal"
    assert events[-1]["message"] == "internal error (TimeoutError)"
    await communicator.disconnect()


async def test_cancel_with_nothing_running_is_ignored() -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "cancel"})
    await communicator.receive_nothing()
    await communicator.disconnect()


async def test_a_second_ask_while_one_runs_is_refused_and_the_first_goes_on(slow_answers: None) -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    first_event = await communicator.receive_json_from(timeout=20)
    await communicator.send_json_to({"type": "ask", "question": "How do I change my email?"})

    events = [first_event]
    refusals = []
    while True:
        event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
        if event["request_id"] != first_event["request_id"]:
            refusals.append(event)
            continue
        events.append(event)
        if event["channel"] in ("meta_summary", "error"):
            break
    assert_one_stream(events)
    assert events[-1]["channel"] == "meta_summary"
    [refusal] = refusals
    assert refusal["channel"] == "error" and refusal["code"] == "bad_request" and refusal["seq"] == 1
    assert first_event["request_id"] in refusal["message"] and "already" in refusal["message"]
    await communicator.disconnect()


async def test_closing_the_socket_cancels_the_running_exchange(slow_answers: None, opened_exchanges: list) -> None:
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    while (await communicator.receive_json_from(timeout=20))["channel"] != "answer":
        pass
    await communicator.disconnect()
    run = opened_exchanges[0].run
    await run.wait(CANCELLED_WITHIN)
    assert run.done, "the pipeline must stop at once when the socket closes"
    assert run.terminal is not None and run.terminal["code"] == "cancelled"
    await pending_records()
    assert (await Message.objects.aget(role="assistant")).status == "cancelled"


BAD_MESSAGES = [
    pytest.param("{not json", "not valid JSON", id="invalid-json"),
    pytest.param(" ", "not valid JSON", id="blank-text"),
    pytest.param(json.dumps(["ask"]), "must be a JSON object, not list", id="array"),
    pytest.param(json.dumps("ask"), "must be a JSON object, not str", id="string"),
    pytest.param(json.dumps({"type": "hello"}), "unknown message type 'hello'", id="unknown-type"),
    pytest.param(json.dumps({"question": "hi"}), "unknown message type None", id="missing-type"),
    pytest.param(json.dumps({"type": "ask"}), "'question' is required", id="missing-question"),
    pytest.param(json.dumps({"type": "ask", "question": "   "}), "'question' is empty", id="empty-question"),
    pytest.param(json.dumps({"type": "ask", "question": 42}), "'question' must be a string", id="number-question"),
    pytest.param(json.dumps({"type": "ask", "question": "x" * 2001}), "the limit is 2000", id="too-long"),
    pytest.param(
        json.dumps({"type": "ask", "question": "hi", "backend": "gpt"}), "'backend' must be one of", id="bad-backend"
    ),
    pytest.param(
        json.dumps({"type": "ask", "question": "hi", "conversation_id": 7}),
        "'conversation_id' must be a string",
        id="number-conversation",
    ),
    pytest.param(
        json.dumps({"type": "ask", "question": "hi", "conversation_id": str(uuid.uuid4())}),
        "unknown conversation_id",
        id="unknown-conversation",
    ),
    pytest.param(
        json.dumps({"type": "ask", "question": "hi", "conversation_id": "not-a-uuid"}),
        "unknown conversation_id",
        id="malformed-conversation",
    ),
    pytest.param('{"type": "ask", "question": "x\\ud800y"}', "'question' contains a lone UTF-16", id="surrogate"),
    pytest.param('{"type": "ask", "question": "x\\u0000y"}', "'question' contains a NUL", id="nul"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_MESSAGES)
async def test_bad_input_gets_bad_request_naming_the_problem_and_writes_nothing(text: str, problem: str) -> None:
    communicator = await connected()
    await communicator.send_to(text_data=text)
    event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
    assert event["channel"] == "error" and event["code"] == "bad_request"
    assert event["seq"] == 1 and event["source"] == "ask_stream" and event["request_id"]
    assert problem in event["message"]
    await communicator.receive_nothing()
    # The socket stays usable after a refusal.
    await communicator.send_json_to({"type": "cancel"})
    await communicator.receive_nothing()
    await communicator.disconnect()
    await pending_records()
    assert await Message.objects.acount() == 0
    assert await Conversation.objects.acount() == 0


async def test_binary_frames_are_refused() -> None:
    communicator = await connected()
    await communicator.send_to(bytes_data=b"\x00\x01")
    event = await communicator.receive_json_from(timeout=EVENT_TIMEOUT)
    assert event["code"] == "bad_request" and "binary" in event["message"]
    await communicator.disconnect()


async def test_someone_elses_conversation_is_unknown() -> None:
    owner = await connected()
    await owner.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    conversation_id = (await ws_events(owner))[-1]["conversation_id"]
    await owner.disconnect()
    await pending_records()

    stranger = await connected()
    await stranger.send_json_to({"type": "ask", "question": "and then?", "conversation_id": conversation_id})
    event = await stranger.receive_json_from(timeout=EVENT_TIMEOUT)
    assert event["code"] == "bad_request" and "unknown conversation_id" in event["message"]
    await stranger.disconnect()


async def test_the_client_cookie_lets_a_new_socket_continue_a_conversation() -> None:
    cookie = client_cookie()
    first = await connected(cookie)
    await first.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    conversation_id = (await ws_events(first))[-1]["conversation_id"]
    await first.disconnect()
    await pending_records()

    second = await connected(cookie)
    await second.send_json_to({"type": "ask", "question": "Shorter please", "conversation_id": conversation_id})
    events = await ws_events(second)
    assert events[-1]["channel"] == "meta_summary" and events[-1]["conversation_id"] == conversation_id
    await second.disconnect()


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param([(b"origin", b"http://evil.example")], id="foreign-origin"),
        pytest.param([], id="no-origin"),
        pytest.param([(b"origin", b"http://localhost:9999")], id="another-port"),
        pytest.param([(b"origin", b"https://localhost")], id="another-scheme"),
        pytest.param([(b"origin", b"http://localhost"), (b"host", b"evil.example")], id="foreign-host"),
    ],
)
async def test_the_origin_check_refuses_other_sites(headers: list) -> None:
    host = [] if any(name == b"host" for name, _ in headers) else [(b"host", b"localhost")]
    communicator = WebsocketCommunicator(application(), "/ws/chat/", headers=[*host, *headers])
    connected_ok, _ = await communicator.connect()
    assert not connected_ok


@pytest.mark.parametrize(
    ("host", "origin"),
    [(b"localhost", b"http://localhost"), (b"localhost:8000", b"http://localhost:8000"), (b"[::1]", b"http://[::1]")],
)
async def test_the_sites_own_origin_is_accepted(host: bytes, origin: bytes) -> None:
    communicator = WebsocketCommunicator(application(), "/ws/chat/", headers=[(b"host", host), (b"origin", origin)])
    connected_ok, _ = await communicator.connect()
    assert connected_ok
    await communicator.disconnect()


# --- through the LLM simulator and the process concurrency manager -------------------------------------------


async def asked_and_streaming(question: str) -> WebsocketCommunicator:
    """A socket whose answer has started streaming (its first answer delta was received)."""
    communicator = await connected()
    await communicator.send_json_to({"type": "ask", "question": question})
    while (await communicator.receive_json_from(timeout=FIRST_EVENT_TIMEOUT))["channel"] != "answer":
        pass
    return communicator


async def test_closing_the_socket_mid_answer_frees_the_llm_slot_and_the_upstream_request_promptly(
    llm_app: LLMApp, app_sim: SimulatorProcess
) -> None:
    manager = await llm_app()
    await app_sim.afaults(fail_next=STALLED_ANSWER)
    communicator = await asked_and_streaming("How do I reset my password?")
    assert chat_stats(manager)["in_progress"] == 1, "the answer holds a chat slot while it streams"
    assert (await app_sim.astats())["running"] == 1

    await communicator.disconnect()
    stats = await wait_slot_and_upstream_free(manager, app_sim, within=FREED_WITHIN)
    assert stats["total_acquired"] == stats["total_released"] == 2  # the plan and the answer


async def test_no_llm_slot_within_the_acquire_timeout_ends_the_answer_with_busy_and_counts_the_timeouts(
    llm_app: LLMApp, app_sim: SimulatorProcess, settings: Any
) -> None:
    settings.RAG_DEGRADED_ANSWERS = False  # with it on, the answer comes from the passages (test_sse)
    manager = await llm_app(limit_chat=1, acquire_timeout=0.2)
    await app_sim.afaults(fail_next=STALLED_ANSWER)
    holder = await asked_and_streaming("How do I reset my password?")  # holds the one chat slot

    second = await connected()
    asked = time.monotonic()
    await second.send_json_to({"type": "ask", "question": "How do I change my email address?"})
    events = await ws_events(second)
    elapsed = time.monotonic() - asked

    assert_one_stream(events)
    terminal = events[-1]
    assert (terminal["channel"], terminal["code"]) == ("error", "busy")
    assert terminal["retry_after"] >= 1
    assert not [e for e in events if e["channel"] == "answer"]
    stats = chat_stats(manager)
    # The plan waited its 0.2 s and fell back to the rules; the answer waited its 0.2 s and gave up.
    assert (stats["total_timeout"], stats["total_rejected"]) == (2, 0)
    assert elapsed >= 0.4
    assert (await app_sim.astats())["attempts"] == 2, "a call that got no slot must not reach the model"
    await second.disconnect()

    await holder.disconnect()
    await wait_slot_and_upstream_free(manager, app_sim)
