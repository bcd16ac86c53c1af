"""Clients for the chat transports, as a browser or an SSE client would use them."""

from __future__ import annotations

import json
import uuid
from typing import Any

from channels.testing import ApplicationCommunicator, WebsocketCommunicator

from rag.events import TERMINAL_CHANNELS

ORIGIN = (b"origin", b"http://localhost")
HOST = (b"host", b"localhost")
# The first question of a test run opens the store and compiles the graph; later ones take milliseconds.
FIRST_EVENT_TIMEOUT = 20.0
EVENT_TIMEOUT = 5.0
# A disconnect must cancel a `slow_answers` run at once. The bound is the behaviour under test, set generous for a
# loaded machine yet below the seconds such an answer takes to end by itself; the run's `cancelled` terminal (not a
# `meta_summary`) is what shows it was stopped rather than finished.
CANCELLED_WITHIN = 3.0
STREAM_CHAT = "/api/v1/rag/ask/stream_chat"
QUESTION = "How do I reset my password?"


def client_cookie() -> tuple[bytes, bytes]:
    """The cookie header of a new browser (a client id of its own)."""
    return (b"cookie", f"hc_client={uuid.uuid4().hex}".encode())


def assert_whole_stream(events: list[dict[str, Any]]) -> None:
    """seq 1..n, each once, one request, one terminal event at the end."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len({e["request_id"] for e in events}) == 1
    assert [e for e in events if e["channel"] in TERMINAL_CHANNELS] == [events[-1]]


def application() -> Any:
    from chatbot.asgi import application as app

    return app


def ws_communicator(*headers: tuple[bytes, bytes], origin: bool = True) -> WebsocketCommunicator:
    all_headers = [HOST, ORIGIN, *headers] if origin else [HOST, *headers]
    return WebsocketCommunicator(application(), "/ws/chat/", headers=all_headers)


async def ws_events(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    """Every event up to and including the terminal one."""
    events: list[dict[str, Any]] = []
    while True:
        timeout = FIRST_EVENT_TIMEOUT if not events else EVENT_TIMEOUT
        event = await communicator.receive_json_from(timeout=timeout)
        events.append(event)
        if event["channel"] in TERMINAL_CHANNELS:
            return events


def http_scope(
    method: str, path: str, *, headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b""
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [(b"host", b"localhost"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


JSON_CONTENT = (b"content-type", b"application/json")


def ask_body(question: Any = None, **extra: Any) -> bytes:
    payload = dict(extra)
    if question is not None:
        payload["question"] = question
    return json.dumps(payload, ensure_ascii=False).encode()


class SseResponse:
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status = status
        self.headers = {k.decode().lower(): v.decode() for k, v in headers}
        self.raw_headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def frames(self) -> list[tuple[int, dict[str, Any]]]:
        return parse_sse(self.body)

    def events(self) -> list[dict[str, Any]]:
        return [event for _id, event in self.frames()]


def parse_sse(body: bytes) -> list[tuple[int, dict[str, Any]]]:
    """(id, event) per frame; every frame must be exactly `id: <n>` then `data: <json>`."""
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), "the stream must end at a frame boundary"
    frames = []
    for block in text[:-2].split("\n\n"):
        id_line, data_line = block.split("\n")
        assert id_line.startswith("id: ") and data_line.startswith("data: "), block
        frames.append((int(id_line[4:]), json.loads(data_line[6:])))
    return frames


async def sse_start(
    path: str, body: bytes, *, headers: list[tuple[bytes, bytes]] | None = None, method: str = "POST"
) -> ApplicationCommunicator:
    communicator = ApplicationCommunicator(application(), http_scope(method, path, headers=headers))
    await communicator.send_input({"type": "http.request", "body": body, "more_body": False})
    return communicator


async def sse_request(
    path: str,
    body: bytes,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    method: str = "POST",
) -> SseResponse:
    """The whole response; the consumer must end the body and stop on its own."""
    communicator = await sse_start(path, body, headers=[JSON_CONTENT] if headers is None else headers, method=method)
    start = await communicator.receive_output(timeout=FIRST_EVENT_TIMEOUT)
    assert start["type"] == "http.response.start"
    chunks = []
    while True:
        message = await communicator.receive_output(timeout=EVENT_TIMEOUT)
        assert message["type"] == "http.response.body"
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    # Stopped by itself after the last body message, without waiting for http.disconnect.
    await communicator.wait(timeout=1)
    return SseResponse(start["status"], start.get("headers", []), b"".join(chunks))


async def sse_until_answer_delta(communicator: ApplicationCommunicator) -> bytes:
    """The body sent until the first answer delta; the response must have started with 200 and still be open."""
    start = await communicator.receive_output(timeout=FIRST_EVENT_TIMEOUT)
    assert start["status"] == 200
    received = b""
    while b'"channel":"answer"' not in received:
        message = await communicator.receive_output(timeout=EVENT_TIMEOUT)
        received += message["body"]
        assert message["more_body"]
    return received


async def sse_rest(communicator: ApplicationCommunicator) -> bytes:
    """The rest of a streaming response's body, read to its last body message."""
    body = b""
    while True:
        message = await communicator.receive_output(timeout=EVENT_TIMEOUT)
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body
