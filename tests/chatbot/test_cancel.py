"""Cancelling an answer from any worker: the SSE cancel endpoint, and a WebSocket `cancel` after a resume on another
worker, reach the answer through the channel layer wherever it runs.

Two workers in one test: each is a stream registry and a channel layer, and the ASGI application of this process
acts as one or the other (`act_as`) the way a load balancer would send requests to one or the other. The worker
running an answer keeps its stream and its layer (they were taken when the answer started), exactly as if the
other worker were another process.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, channel_layers
from channels.testing import ApplicationCommunicator

from chatbot import cancel, replay
from chatbot.models import Message
from chatbot.streaming import pending_records
from tests.chatbot.helpers import (
    EVENT_TIMEOUT,
    FIRST_EVENT_TIMEOUT,
    JSON_CONTENT,
    QUESTION,
    STREAM_CHAT,
    ask_body,
    client_cookie,
    parse_sse,
    sse_request,
    sse_rest,
    sse_start,
    ws_communicator,
    ws_events,
)
from tests.waiting import until, until_async

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = "redis://127.0.0.1:6379/1"


@dataclass
class Worker:
    registry: replay.StreamRegistry
    layer: BaseChannelLayer


ActAs = Callable[[Worker], None]


@pytest.fixture
def act_as() -> Iterator[ActAs]:
    saved_layer = channel_layers.backends.get(DEFAULT_CHANNEL_LAYER)

    def act(worker: Worker) -> None:
        replay._registry = worker.registry
        channel_layers.set(DEFAULT_CHANNEL_LAYER, worker.layer)

    yield act
    replay.stream_registry_reset()
    if saved_layer is None:
        channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
    else:
        channel_layers.set(DEFAULT_CHANNEL_LAYER, saved_layer)


@pytest.fixture
def in_memory_workers() -> tuple[Worker, Worker, InMemoryChannelLayer]:
    # The in-memory layer reaches one process: both workers share it, each has its own streams.
    layer = InMemoryChannelLayer()
    return Worker(replay.StreamRegistry(), layer), Worker(replay.StreamRegistry(), layer), layer


@pytest.fixture
async def redis_workers() -> AsyncIterator[tuple[Worker, Worker, Any]]:
    """Two workers as two processes would be: a channels-redis layer each, one Redis, one stream store."""
    redis = pytest.importorskip("redis")
    channels_redis = pytest.importorskip("channels_redis.core")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping()
    except (redis.RedisError, OSError):
        pytest.skip("Redis does not answer on 127.0.0.1:6379")
    prefix = f"test-cancel-{uuid.uuid4().hex[:8]}"
    store = replay.RedisStreamStore(REDIS_URL, prefix, retention_seconds=300, max_events=10_000)
    layers = [channels_redis.RedisChannelLayer(hosts=[REDIS_URL], prefix=prefix) for _ in range(2)]
    yield (
        Worker(replay.StreamRegistry(store=store), layers[0]),
        Worker(replay.StreamRegistry(store=store), layers[1]),
        redis.asyncio.Redis.from_url(REDIS_URL),
    )
    await layers[0].flush()
    for layer in layers:
        await layer.close_pools()


async def sse_until_answer(cookie: tuple[bytes, bytes]) -> tuple[ApplicationCommunicator, str]:
    """Start a `continue` SSE answer, read it up to its first answer delta; returns (communicator, request id)."""
    body = ask_body(QUESTION, on_disconnect="continue")
    communicator = await sse_start(STREAM_CHAT, body, headers=[JSON_CONTENT, cookie])
    start = await communicator.receive_output(timeout=FIRST_EVENT_TIMEOUT)
    assert start["status"] == 200
    received = b""
    while b'"channel":"answer"' not in received:
        received += (await communicator.receive_output(timeout=EVENT_TIMEOUT))["body"]
    first = parse_sse(received[: received.find(b"\n\n") + 2])[0][1]
    return communicator, first["request_id"]


async def sse_terminal(communicator: ApplicationCommunicator) -> dict[str, Any]:
    """Read an SSE response to its end; its last frame's event."""
    rest = await sse_rest(communicator)
    await communicator.wait(timeout=1)
    return json.loads(rest.rstrip().rsplit(b"data: ", 1)[1])


async def cancel_request(request_id: str, cookie: tuple[bytes, bytes]) -> Any:
    path = f"/api/v1/rag/ask/stream/{request_id}/cancel"
    return await sse_request(path, b"{}", headers=[JSON_CONTENT, cookie])


def assert_not_found(response: Any, request_id: str) -> None:
    assert response.status == 404, response.body
    error = response.json()["error"]
    assert error["code"] == "not_found" and error["request_id"] == request_id and request_id in error["message"]


# --- in-memory channel layer (the default without REDIS_URL) ----------------------------------------------------


async def test_sse_cancel_reaches_an_answer_running_in_another_worker(
    slow_answers: None, opened_exchanges: list, act_as: ActAs, in_memory_workers: tuple
) -> None:
    runner, other, layer = in_memory_workers
    act_as(runner)
    cookie = client_cookie()
    communicator, request_id = await sse_until_answer(cookie)
    assert layer.groups.get(cancel.run_group(request_id)), "a running answer listens for cancels"

    act_as(other)
    assert other.registry.local(request_id) is None
    assert_not_found(await cancel_request(request_id, client_cookie()), request_id)
    run = opened_exchanges[0].run
    assert not run.done, "another client's cancel must not stop the answer"

    cancelled = await cancel_request(request_id, cookie)
    assert cancelled.status == 202 and cancelled.json() == {"request_id": request_id, "status": "cancelling"}
    terminal = await sse_terminal(communicator)
    assert terminal["channel"] == "error" and terminal["code"] == "cancelled"
    await run.wait(1.0)
    assert run.terminal is not None and run.terminal["code"] == "cancelled"

    stream = runner.registry.local(request_id)
    assert stream is not None
    await stream.wait()
    await until(lambda: cancel.run_group(request_id) not in layer.groups)  # the listener leaves right after the end
    assert_not_found(await cancel_request(request_id, cookie), request_id)


async def test_a_cancel_after_the_connection_closed_stops_a_continue_answer(
    slow_answers: None, opened_exchanges: list, act_as: ActAs, in_memory_workers: tuple
) -> None:
    # The chat page closing: its SSE connection goes away (a `continue` answer keeps running for a resume that
    # will never come), and the cancel it sent on the way out lands on any worker a moment later.
    runner, other, _layer = in_memory_workers
    act_as(runner)
    cookie = client_cookie()
    communicator, request_id = await sse_until_answer(cookie)
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=1)
    run = opened_exchanges[0].run
    await run.wait(0.2)  # a negative check, a fixed wait: the answer does not end within it
    assert not run.done, "a `continue` answer outlives its connection"

    act_as(other)
    cancelled_at = asyncio.get_running_loop().time()
    cancelled = await cancel_request(request_id, cookie)
    assert cancelled.status == 202, cancelled.body
    await run.wait(1.0)
    assert run.terminal is not None and run.terminal["code"] == "cancelled"
    assert asyncio.get_running_loop().time() - cancelled_at < 1.0

    await pending_records()
    assistant = await Message.objects.aget(request_id=request_id, role="assistant")
    assert assistant.status == "cancelled"


async def test_a_finished_answer_leaves_its_group_and_cannot_be_cancelled(
    act_as: ActAs, in_memory_workers: tuple
) -> None:
    runner, other, layer = in_memory_workers
    act_as(runner)
    cookie = client_cookie()
    answered = await sse_request(STREAM_CHAT, ask_body(QUESTION), headers=[JSON_CONTENT, cookie])
    request_id = answered.events()[0]["request_id"]
    assert answered.events()[-1]["channel"] == "meta_summary"
    await until(lambda: cancel.run_group(request_id) not in layer.groups)

    # Neither the worker that ran it nor another one has a run to stop.
    assert_not_found(await cancel_request(request_id, cookie), request_id)
    act_as(other)
    assert_not_found(await cancel_request(request_id, cookie), request_id)
    unknown = uuid.uuid4().hex
    assert_not_found(await cancel_request(unknown, cookie), unknown)
    assert_not_found(await cancel_request("not a request id", cookie), "not a request id")


async def test_with_the_channel_layer_down_a_remote_cancel_says_so_and_the_local_one_still_works(
    slow_answers: None, opened_exchanges: list, act_as: ActAs, in_memory_workers: tuple
) -> None:
    # channels-redis pointed at a port nothing listens on: every layer call fails at once. (The consumers receive
    # on the layer too, so the application cannot run on it: the cancel module is called directly.)
    channels_redis = pytest.importorskip("channels_redis.core")
    broken = channels_redis.RedisChannelLayer(hosts=["redis://127.0.0.1:1/0"], prefix="test-cancel-down")
    runner, _other, _layer = in_memory_workers
    act_as(runner)
    cookie = client_cookie()
    communicator, request_id = await sse_until_answer(cookie)
    client_id = "anon:" + cookie[1].decode().split("=", 1)[1]
    stream = runner.registry.local(request_id)
    assert stream is not None

    outcome = await cancel.cancel_elsewhere(request_id, client_id=client_id, layer=broken)
    assert outcome is cancel.Outcome.UNREACHABLE, "a failed layer is not an answer that does not exist"
    listener = cancel.cancel_listen(stream, layer=broken)
    assert listener is not None
    await asyncio.wait_for(listener, timeout=2.0)  # could not join the group: it gives up, the answer goes on
    assert stream.running and not opened_exchanges[0].run.done

    cancelled = await cancel_request(request_id, cookie)  # lands on the worker running it
    assert cancelled.status == 202
    terminal = await sse_terminal(communicator)
    assert terminal["channel"] == "error" and terminal["code"] == "cancelled"


# --- channels-redis against a real Redis ------------------------------------------------------------------------


async def test_sse_cancel_crosses_workers_through_redis(
    slow_answers: None, opened_exchanges: list, act_as: ActAs, redis_workers: tuple
) -> None:
    runner, other, redis = redis_workers
    act_as(runner)
    cookie = client_cookie()
    communicator, request_id = await sse_until_answer(cookie)
    group_key = runner.layer._group_key(cancel.run_group(request_id))
    assert await redis.zcard(group_key) == 1

    act_as(other)
    assert_not_found(await cancel_request(request_id, client_cookie()), request_id)
    run = opened_exchanges[0].run
    assert not run.done

    cancelled = await cancel_request(request_id, cookie)
    assert cancelled.status == 202 and cancelled.json() == {"request_id": request_id, "status": "cancelling"}
    terminal = await sse_terminal(communicator)
    assert terminal["channel"] == "error" and terminal["code"] == "cancelled"
    await run.wait(1.0)
    assert run.terminal is not None and run.terminal["code"] == "cancelled"

    await until_async(lambda: redis.zcard(group_key), lambda members: members == 0)  # it leaves right after the end
    assert_not_found(await cancel_request(request_id, cookie), request_id)
    await redis.aclose()


async def test_ws_cancel_after_a_resume_on_another_worker(
    slow_answers: None, opened_exchanges: list, act_as: ActAs, redis_workers: tuple
) -> None:
    runner, other, redis = redis_workers
    await redis.aclose()
    act_as(runner)
    cookie = client_cookie()
    first = ws_communicator(cookie)
    assert (await first.connect())[0]
    await first.send_json_to({"type": "ask", "question": QUESTION, "on_disconnect": "continue"})
    events = [await first.receive_json_from(timeout=FIRST_EVENT_TIMEOUT)]
    while events[-1]["channel"] != "answer":
        events.append(await first.receive_json_from(timeout=EVENT_TIMEOUT))
    await first.disconnect()
    request_id = events[0]["request_id"]

    # The client reconnects through the load balancer and lands on the other worker, which serves the resume
    # from Redis and has no stream of its own to cancel.
    act_as(other)
    second = ws_communicator(cookie)
    assert (await second.connect())[0]
    await second.send_json_to({"type": "resume", "request_id": request_id, "last_seq": events[-1]["seq"]})
    resumed = [await second.receive_json_from(timeout=EVENT_TIMEOUT)]
    assert other.registry.local(request_id) is None
    await second.send_json_to({"type": "cancel", "request_id": request_id})
    resumed += await ws_events(second)
    assert resumed[-1]["channel"] == "error" and resumed[-1]["code"] == "cancelled"
    assert [e["seq"] for e in events + resumed] == list(range(1, len(events) + len(resumed) + 1))
    run = opened_exchanges[0].run
    assert run.terminal is not None and run.terminal["code"] == "cancelled"
    await second.disconnect()
