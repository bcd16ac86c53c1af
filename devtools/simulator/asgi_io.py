"""Small ASGI 3 helpers: body reading, JSON/SSE responses, disconnect watching and connection dropping."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Coroutine, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Scope extension a server adapter may set so the app can close the TCP connection mid-response (plain ASGI
# has no message for that). Value: {"abort": callable taking no arguments}. See server.py for daphne's.
ABORT_EXTENSION = "llm_simulator.abort_connection"

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class ClientDisconnected(Exception):
    """The client went away before the request body was complete."""


class ConnectionDropped(Exception):
    """Raised out of the app to make a server without the abort extension close the connection."""


def dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_start(send: Send, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})


async def send_body(send: Send, body: bytes, *, more: bool = False) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def send_bytes(
    send: Send, status: int, body: bytes, content_type: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    all_headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *headers]
    await send_start(send, status, all_headers)
    await send_body(send, body)


async def send_json(send: Send, status: int, payload: Any, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, dumps(payload).encode("utf-8"), b"application/json", headers)


def error_payload(status: int, message: str) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error"}
    kind = kinds.get(status, "rate_limit_error" if status == 429 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}


def sse_event(data: str, event: str | None = None) -> bytes:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {data}\n\n".encode()


async def wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def run_until_disconnect(
    receive: Receive, work: Coroutine[Any, Any, None], on_disconnect: Callable[[], None] | None = None
) -> bool:
    """Run ``work`` while watching the receive channel; cancel it if the client goes away.

    Returns True when the client disconnected first; ``on_disconnect`` runs before the cancellation, so
    bookkeeping done there is visible no later than the freed resources. Servers only report a closed
    connection through ``receive``, and sending to a closed connection is silently dropped, so without this
    watcher an abandoned stream would keep its decode slot until it finished on its own.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        disconnected = not task.done()
        if disconnected and on_disconnect is not None:
            on_disconnect()
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    if disconnected:
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return True
    task.result()  # re-raise what the work raised
    return False


def abort_connection(scope: Scope) -> bool:
    """Close the client connection now, if the server offers the hook. Returns whether it did."""
    extension = (scope.get("extensions") or {}).get(ABORT_EXTENSION)
    abort = extension.get("abort") if isinstance(extension, dict) else None
    if abort is None:
        return False
    abort()
    return True
