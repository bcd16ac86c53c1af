"""SSE: `POST /api/v1/rag/ask/stream` (Responses backend) and `/api/v1/rag/ask/stream_chat` (Chat backend) answer
a question; `GET /api/v1/rag/ask/stream/<request_id>` resumes an answer after `Last-Event-ID` (header, or the
`last_event_id` query parameter); `POST /api/v1/rag/ask/stream/<request_id>/cancel` stops one.

The ask body may carry `"on_disconnect": "cancel" | "continue"`: `cancel` (the default) frees the LLM slot as
soon as the connection is lost; `continue` lets the answer finish and keeps its events for a resume. A resume
answers 200 with the missed events (live until the terminal one), 204 when the client already has the terminal
event (which also tells an EventSource to stop reconnecting), 410 when the stream has expired, was never seen or
is another client's (one answer, so ids cannot be probed), 400 for a `Last-Event-ID` that is not a seq of it.

While the worker drains before it stops (`chatbot.drain`), an ask (and a resume of a stream not running here) is
refused with 503 + Retry-After and the error code `unavailable`; a stream still running when the drain window
closes ends with the terminal `error` `unavailable` (`retry_after`).

A cancel reaches the answer in whichever worker runs it (`chatbot.cancel`): 202 when a running answer of this
client took it, 404 naming the request id when there is none (finished, unknown, or another client's), 503 when
the channel layer could not ask the other workers.

Disconnects (Channels issue 1249): `AsyncHttpConsumer` hands the whole body to `handle()` and dispatches one
message at a time, so while `handle()` streams nobody reads `http.disconnect` and an abandoned pipeline keeps
its LLM slot until it ends. Here the response runs in a task of its own once the body is complete, and the
consumer goes back to receiving: `http.disconnect` (daphne sends it when the connection is lost) cancels the
task, which applies the request's disconnect policy (`cancel` stops the pipeline within the second). The
pipeline itself feeds the stream relay (`chatbot.replay`), never the socket. When the response ends normally,
the task wakes the receive loop with an internal `sse.finished` message and the consumer stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from asgiref.typing import HTTPDisconnectEvent
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from chatbot import drain, lifecycle, security
from chatbot.cancel import Outcome, cancel_run
from chatbot.consumers.common import event_json, retry_after_seconds, stream_open, transport_error_event
from chatbot.replay import LiveStream, ResumeRefused, stream_registry
from chatbot.streaming import AskInput, BadRequest, ask_input_parse, exchange_open
from rag.events import TERMINAL_CHANNELS, Event

logger = logging.getLogger(__name__)

Message = Mapping[str, Any]
Header = tuple[bytes, bytes]

FINISHED = "sse.finished"


def sse_frame(event: Event) -> bytes:
    return f"id: {event['seq']}\ndata: {event_json(event)}\n\n".encode()


class _StreamingHttpConsumer(AsyncHttpConsumer):
    """An HTTP consumer whose response runs in a task while the consumer keeps listening for `http.disconnect`."""

    allowed_methods: tuple[str, ...] = ("POST",)
    # A question is at most RAG_MAX_QUESTION_CHARS (2000 by default); a body far beyond that is not a question.
    max_body_bytes = 64 * 1024
    # After http.disconnect, how long the consumer waits for the response to unwind before it stops anyway.
    disconnect_grace_seconds = 1.0

    def __init__(self) -> None:
        super().__init__()
        self.client_id = ""
        self._client_hex = ""
        self._client_is_new = False
        self._body_bytes = 0
        self._response: asyncio.Task[None] | None = None
        self._finished = asyncio.Event()

    # --- the receive loop ---------------------------------------------------------------------------------

    async def __call__(self, scope: Mapping[str, Any], receive: Callable[[], Awaitable[Message]], send: Any) -> None:
        self.client_id, self._client_hex, self._client_is_new = security.client_from_scope(scope)

        async def receive_or_finished() -> Message:
            # The stock loop only wakes for a message; the response ending must wake it too so it can stop.
            if self._finished.is_set():
                return {"type": FINISHED}
            incoming = asyncio.ensure_future(receive())
            finished = asyncio.ensure_future(self._finished.wait())
            try:
                await asyncio.wait({incoming, finished}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                finished.cancel()
                if not incoming.done():
                    incoming.cancel()  # a pending queue get: cancelling it loses no message
            if incoming.done() and not incoming.cancelled():
                return incoming.result()
            return {"type": FINISHED}

        try:
            # The stubs' ASGI types know neither the scope keys Channels adds nor our own `sse.finished` message.
            await super().__call__(scope, receive_or_finished, send)  # type: ignore[arg-type]
        finally:
            # Also reached when the server cancels the application (shutdown, application_close_timeout).
            await self._stop_response()

    async def http_request(self, message: Message) -> None:
        if self._response is not None:
            return  # the body was complete already; nothing more belongs to this request
        method = self.scope.get("method")
        if method not in self.allowed_methods:
            allowed = ", ".join(self.allowed_methods)
            await self._send_json_error(
                405, "bad_request", f"use {allowed}", extra_headers=[(b"allow", allowed.encode("ascii"))]
            )
            raise StopConsumer()
        chunk = message.get("body", b"")
        self._body_bytes += len(chunk)
        if self._body_bytes > self.max_body_bytes:
            await self._send_json_error(413, "bad_request", f"request body is larger than {self.max_body_bytes} bytes")
            raise StopConsumer()
        self.body.append(chunk)
        if message.get("more_body"):
            return
        self._response = asyncio.create_task(self._respond(b"".join(self.body)), name="sse-response")
        self._response.add_done_callback(self._response_done)

    async def http_disconnect(self, message: HTTPDisconnectEvent) -> None:
        await self._stop_response()
        await super().http_disconnect(message)  # runs disconnect() and raises StopConsumer

    async def sse_finished(self, message: Message) -> None:
        raise StopConsumer()

    def _response_done(self, task: asyncio.Task[None]) -> None:
        self._finished.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("SSE response failed: %r", task.exception())

    async def _stop_response(self) -> None:
        task = self._response
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=self.disconnect_grace_seconds)

    async def _respond(self, body: bytes) -> None:
        raise NotImplementedError

    # --- responses ----------------------------------------------------------------------------------------

    def _base_headers(self) -> list[Header]:
        headers: list[Header] = []
        if self._client_is_new:
            cookie = security.client_cookie_header(self._client_hex, secure=security.scope_is_secure(self.scope))
            headers.append((b"set-cookie", cookie.encode("latin-1")))
        return headers

    async def _send_json_error(
        self, status: int, code: str, message: str, *, extra_headers: list[Header] | None = None, **extra: Any
    ) -> None:
        await self._send_json(status, {"error": {"code": code, "message": message, **extra}}, extra_headers)

    async def _send_unavailable(self) -> None:
        """503 + Retry-After: this worker is draining; a proxy (or the client) asks another one."""
        seconds = lifecycle.retry_after_seconds()
        await self._send_json_error(
            503,
            drain.UNAVAILABLE,
            drain.REFUSED_MESSAGE,
            extra_headers=[(b"retry-after", str(seconds).encode("ascii"))],
            retry_after=seconds,
        )

    async def _send_json(self, status: int, content: Any, extra_headers: list[Header] | None = None) -> None:
        headers = [(b"content-type", b"application/json"), *self._base_headers(), *(extra_headers or [])]
        await self.send_response(status, json.dumps(content, ensure_ascii=False).encode(), headers=headers)

    def _request_id(self) -> str:
        scope: Mapping[str, Any] = self.scope  # Channels' URL routing adds `url_route`, which HTTPScope does not list
        return str(scope.get("url_route", {}).get("kwargs", {}).get("request_id", ""))


class AskStreamConsumer(_StreamingHttpConsumer):
    """One SSE answer per request. `backend` is fixed by the route (`as_asgi(backend=...)`)."""

    # How long the response status may wait for a first event that is not a `status` one. A `busy` terminal in
    # that window (a full wait queue or a rate limit refuses at once) becomes HTTP 429 + Retry-After; after it,
    # the 200 and the buffered stage events go out so a slow first token never looks like a dead connection.
    status_hold_seconds = 0.5

    def __init__(self, *, backend: str) -> None:
        super().__init__()
        self.backend = backend

    async def _respond(self, body: bytes) -> None:
        if lifecycle.is_draining():
            await self._send_unavailable()
            return
        drain.transport_started()
        try:
            ask = self._parse(body)
            exchange = await exchange_open(ask)
        except security.UnsupportedContentType as exc:
            await self._send_json_error(415, "bad_request", str(exc))
            return
        except BadRequest as exc:
            await self._send_json_error(400, "bad_request", str(exc))
            return
        except Exception as exc:
            logger.exception("could not start an SSE answer")
            await self._send_json_error(500, "internal", f"internal error ({type(exc).__name__})")
            return
        stream = stream_open(exchange, on_disconnect=ask.on_disconnect)
        await _EventStream(self, stream.request_id, stream.tail(0), stream, hold_seconds=self.status_hold_seconds).run()

    def _parse(self, body: bytes) -> AskInput:
        security.require_json_content_type(self.scope.get("headers") or [])
        try:
            # Decoded here: json.loads(bytes) would also guess UTF-16/32, which no client of ours sends.
            payload = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRequest("request body is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise BadRequest(f"request body is not valid JSON: {exc.msg} at {where}") from None
        return ask_input_parse(payload, backend=self.backend, client_id=self.client_id)


class StreamResumeConsumer(_StreamingHttpConsumer):
    """`GET /api/v1/rag/ask/stream/<request_id>`: the events after `Last-Event-ID`, live until the terminal one."""

    allowed_methods = ("GET",)

    async def _respond(self, body: bytes) -> None:
        request_id = self._request_id()
        if lifecycle.is_draining() and not _runs_here(request_id):
            await self._send_unavailable()  # another worker serves it from Redis, and will still be there
            return
        drain.transport_started()
        try:
            after_seq = self._last_event_id()
            resumption = await stream_registry().resume(request_id, client_id=self.client_id, after_seq=after_seq)
        except ResumeRefused as exc:
            await self._send_json_error(exc.status, exc.code, exc.message)
            return
        if resumption.complete:
            await self.send_response(204, b"", headers=self._base_headers())
            return
        await _EventStream(self, request_id, resumption.events, resumption.local, hold_seconds=0.0).run()

    def _last_event_id(self) -> int:
        headers = self.scope.get("headers") or []
        value = security.header_value(headers, "last-event-id")
        if value is None:
            query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
            value = (query.get("last_event_id") or ["0"])[0]
        value = value.strip() or "0"
        if not value.isdigit():
            raise ResumeRefused(400, f"Last-Event-ID must be the seq of the last event received, not {value!r}")
        return int(value)


def _runs_here(request_id: str) -> bool:
    stream = stream_registry().local(request_id)
    return stream is not None and stream.running


class StreamCancelConsumer(_StreamingHttpConsumer):
    """`POST /api/v1/rag/ask/stream/<request_id>/cancel`: stop an answer (the page's stop button over SSE, where
    closing the connection would not stop a `continue` answer), in whichever worker runs it. Its stream ends with
    `error` `cancelled`."""

    async def _respond(self, body: bytes) -> None:
        request_id = self._request_id()
        try:
            # A JSON body, like the ask endpoints: a cross-site form cannot send one (no CSRF token needed).
            security.require_json_content_type(self.scope.get("headers") or [])
        except security.UnsupportedContentType as exc:
            await self._send_json_error(415, "bad_request", str(exc))
            return
        outcome = await cancel_run(request_id, client_id=self.client_id)
        if outcome is Outcome.DELIVERED:
            await self._send_json(202, {"request_id": request_id, "status": "cancelling"})
        elif outcome is Outcome.UNREACHABLE:
            message = f"could not reach the worker running answer {request_id}; try again"
            await self._send_json_error(503, "upstream_error", message, request_id=request_id)
        else:
            # One answer for finished, unknown and another client's: a cancel reveals nothing about other answers.
            message = f"no running answer {request_id} of this client (it has finished, or never existed)"
            await self._send_json_error(404, "not_found", message, request_id=request_id)


class _EventStream:
    """Forwards a stream as SSE frames; can hold the status line back briefly so a fast `busy` becomes a 429."""

    def __init__(
        self,
        consumer: _StreamingHttpConsumer,
        request_id: str,
        events: AsyncGenerator[Event, None],
        stream: LiveStream | None,
        *,
        hold_seconds: float,
    ) -> None:
        self.consumer = consumer
        self.request_id = request_id
        self.events = events
        self.stream = stream
        self.hold_seconds = hold_seconds
        self.committed = False
        self.last_seq = 0
        self.held: list[Event] = []
        self.lock = asyncio.Lock()

    async def run(self) -> None:
        consumer = self.consumer
        if self.hold_seconds <= 0:
            await self._commit()
        timer = asyncio.create_task(self._commit_later(), name="sse-commit-timer")
        ended = False
        try:
            # aclosing: a cancelled response (disconnect) stops reading the stream at once.
            async with contextlib.aclosing(self.events):
                async for event in self.events:
                    self.last_seq = event["seq"]
                    terminal = event["channel"] in TERMINAL_CHANNELS
                    async with self.lock:
                        if not self.committed:
                            if terminal and event["channel"] == "error" and event.get("code") == "busy":
                                ended = True
                                await self._send_busy(event)
                                return
                            if event["channel"] == "status" and not terminal:
                                self.held.append(event)
                                continue
                            await self._commit()
                        await consumer.send_body(sse_frame(event), more_body=True)
                    if terminal:
                        ended = True
                        break
            await consumer.send_body(b"", more_body=False)
        except asyncio.CancelledError:
            if not ended and drain.window_closed():
                await self._send_unavailable()  # the worker stops: the stream still ends with a terminal event
            raise
        except Exception as exc:
            # Reading the stream failed (e.g. Redis went away mid-resume): it still ends with one terminal event.
            logger.exception("SSE stream %s failed", self.request_id)
            message = exc.message if isinstance(exc, ResumeRefused) else f"internal error ({type(exc).__name__})"
            if self.committed:
                error_event = transport_error_event(
                    "internal", message, request_id=self.request_id, after_seq=self.last_seq
                )
                await consumer.send_body(sse_frame(error_event), more_body=False)
            else:
                await consumer._send_json_error(500, "internal", message)
        finally:
            timer.cancel()
            if not ended and self.stream is not None:
                # The connection went away (or sending failed) before the terminal event: the request's
                # disconnect policy decides whether its answer stops now or finishes for a resume.
                self.stream.transport_lost()

    async def _send_unavailable(self) -> None:
        with contextlib.suppress(Exception):
            if self.committed:
                event = drain.unavailable_event(request_id=self.request_id, after_seq=self.last_seq)
                await asyncio.wait_for(self.consumer.send_body(sse_frame(event), more_body=False), 1.0)
            else:
                self.committed = True
                await asyncio.wait_for(self.consumer._send_unavailable(), 1.0)

    async def _commit_later(self) -> None:
        await asyncio.sleep(self.hold_seconds)
        async with self.lock:
            await self._commit()

    async def _commit(self) -> None:
        """Send the 200 and every held event (the lock is held by the caller)."""
        if self.committed:
            return
        self.committed = True
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),  # nginx would otherwise buffer the whole answer
            (b"x-request-id", self.request_id.encode("ascii")),
            *self.consumer._base_headers(),
        ]
        await self.consumer.send_headers(status=200, headers=headers)
        held, self.held = self.held, []
        # One body message for the held stages (they were ready together); it also pushes the headers out.
        await self.consumer.send_body(b"".join(sse_frame(event) for event in held), more_body=True)

    async def _send_busy(self, event: Event) -> None:
        self.committed = True
        seconds = retry_after_seconds(event)
        await self.consumer._send_json_error(
            429,
            "busy",
            str(event.get("message", "the service is busy")),
            extra_headers=[
                (b"retry-after", str(seconds).encode("ascii")),
                (b"x-request-id", self.request_id.encode("ascii")),
            ],
            retry_after=seconds,
            request_id=self.request_id,
        )
