"""`ws/chat/`: ask, resume and cancel over one WebSocket, events out as JSON text messages (one per message).

Client messages (JSON objects):
- `{"type": "ask", "question": str, "conversation_id"?: str, "backend"?: "chat" | "responses",
  "on_disconnect"?: "cancel" | "continue"}` starts an exchange; its events follow in order, ending with one
  terminal event. `on_disconnect` says what a closed socket does to it: `cancel` (the default) frees the LLM slot
  at once; `continue` lets it finish and keeps its events for a `resume`.
- `{"type": "resume", "request_id": str, "last_seq": int}` sends the events of that request after `last_seq`
  (from any socket of the same client, within the retention window), live until its terminal event. A request
  of another client, an expired one, or a `last_seq` that does not fit gets a terminal `error` `bad_request`
  for that request id (seq `last_seq + 1`) naming the problem.
- `{"type": "cancel", "request_id"?: str}` cancels the exchange this socket is streaming (also one resumed here
  that runs in another worker: the cancel reaches it through the channel layer, `chatbot.cancel`); its stream then
  ends with the terminal `error` `cancelled`. A cancel with nothing running, or naming another request (one that just
  ended), is ignored: it raced with the end of the stream and there is nothing left to stop.

While the worker drains before it stops (`chatbot.drain`): a new socket is closed with 4012 (1012 "service
restart" in the private range: the server library cannot send 1012), an `ask` (or a `resume` of a stream not
running here, for that request) gets a terminal `error` `unavailable` with `retry_after` and then that close; a
stream still running when
the drain window closes ends with the terminal `unavailable`, and every socket is closed 4012 once the drain is
over, for the client to reconnect to another worker.

One stream at a time per socket: an `ask` or `resume` while one streams gets a one-event stream of its own (new
request id, terminal `error` `bad_request` saying which request is still streaming); the running one is not
disturbed. Anything else that is not understood (invalid JSON, a non-object, an unknown `type`, bad fields, an
unknown conversation) gets the same kind of `bad_request` event naming the problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import AsyncGenerator
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from chatbot import drain, lifecycle, security
from chatbot.cancel import Outcome, cancel_elsewhere_later, request_id_valid
from chatbot.consumers.common import event_json, stream_open, transport_error_event
from chatbot.replay import LiveStream, ResumeRefused, stream_registry
from chatbot.sites.access import limit_message, site_admit, visitor_of
from chatbot.sites.selectors import EmbedSite
from chatbot.streaming import AskInput, BadRequest, ask_input_parse, exchange_open
from rag.events import TERMINAL_CHANNELS, Event

logger = logging.getLogger(__name__)


class ChatConsumer(AsyncJsonWebsocketConsumer):
    # After the socket closes, how long to wait for the stream task to unwind before letting go of it.
    disconnect_grace_seconds = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client_id = ""
        self._task: asyncio.Task[None] | None = None
        self._stream: LiveStream | None = None
        self._streaming_id = ""  # request id of the stream being sent (also for a resume served from Redis)
        self._remote = False  # the stream being sent runs in another worker (a resume served from Redis)
        self._cancel_requested = False
        self._remote_cancel: asyncio.Task[Outcome] | None = None

    async def connect(self) -> None:
        # A browser sends the page's `hc_client` cookie with the handshake; a client without one gets an id for
        # the life of the socket (daphne cannot set a cookie on a WebSocket accept).
        self.client_id, _is_new = security.client_id_from_scope(self.scope)
        await self.accept()
        if lifecycle.is_draining():
            await self.close(code=drain.WS_SERVICE_RESTART)  # reconnect (through the proxy) to another worker
            return
        drain.socket_opened(self)

    async def disconnect(self, code: int) -> None:
        drain.socket_closed(self)
        task = self._task
        if task is not None and not task.done():
            task.cancel()  # its `finally` applies the stream's disconnect policy
            await asyncio.wait({task}, timeout=self.disconnect_grace_seconds)

    # --- incoming -----------------------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        # The stock JSON consumer raises on bad JSON, which would drop the socket; a client gets told instead.
        if text_data is None:
            await self._refuse("binary messages are not supported; send JSON text")
            return
        try:
            content = json.loads(text_data)
        except json.JSONDecodeError as exc:
            await self._refuse(f"message is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            await self._refuse(f"message must be a JSON object, not {type(content).__name__}")
            return
        kind = content.get("type")
        if kind == "ask":
            await self._ask(content)
        elif kind == "resume":
            await self._resume(content)
        elif kind == "cancel":
            self._cancel(content.get("request_id"))
        else:
            await self._refuse(f"unknown message type {kind!r}; expected 'ask', 'resume' or 'cancel'")

    async def _refuse_if_busy(self) -> bool:
        if self._task is None or self._task.done():
            return False
        running = self._streaming_id or "starting"
        await self._refuse(
            f"a question is already being answered on this connection (request {running}); "
            "wait for its terminal event or send cancel"
        )
        return True

    async def _refuse_if_draining(self, request_id: str = "", after_seq: int = 0) -> bool:
        """While the worker drains: a terminal `unavailable` (with `retry_after`), then close 4012 so the client
        reconnects elsewhere (unless an answer is still streaming here: the drain closes the socket after it)."""
        if not lifecycle.is_draining():
            return False
        await self.send_json(drain.unavailable_event(request_id=request_id or None, after_seq=after_seq))
        if self._task is None or self._task.done():
            await self.close(code=drain.WS_SERVICE_RESTART)
        return True

    async def _ask(self, content: dict[str, Any]) -> None:
        if await self._refuse_if_draining() or await self._refuse_if_busy():
            return
        try:
            ask = ask_input_parse(content, backend=None, client_id=self.client_id)
        except BadRequest as exc:
            await self._refuse(str(exc))
            return
        site = self.scope.get("embed_site")  # a socket from an embedding website: its limits (chatbot.sites)
        if isinstance(site, EmbedSite):
            allowed, retry_after = await site_admit(site, visitor_of(self.scope))
            if not allowed:
                wait = max(1, math.ceil(retry_after))
                await self.send_json({**transport_error_event("busy", limit_message(wait)), "retry_after": wait})
                return
        self._begin("")
        # In a task: this consumer handles one message at a time, and `cancel` must get through while it streams.
        self._task = asyncio.create_task(self._answer(ask), name="ws-exchange")
        self._task.add_done_callback(_log_failure)

    async def _resume(self, content: dict[str, Any]) -> None:
        if await self._refuse_if_busy():
            return
        request_id, last_seq = content.get("request_id"), content.get("last_seq", 0)
        # Anything that is not a plain token is refused before it is echoed back.
        if not isinstance(request_id, str) or not request_id_valid(request_id):
            await self._refuse("'request_id' must be the request id of a stream (letters, digits, - and _)")
            return
        if isinstance(last_seq, bool) or not isinstance(last_seq, int) or last_seq < 0:
            await self._refuse(f"'last_seq' must be a whole number >= 0, not {last_seq!r}")
            return
        local = stream_registry().local(request_id)
        # A stream running here is served to its end; one of another worker is read there, not here.
        if (local is None or not local.running) and await self._refuse_if_draining(request_id, last_seq):
            return
        self._begin(request_id)
        self._task = asyncio.create_task(self._replay(request_id, last_seq), name="ws-resume")
        self._task.add_done_callback(_log_failure)

    def _begin(self, request_id: str) -> None:
        self._stream = None
        self._streaming_id = request_id
        self._remote = False
        self._cancel_requested = False

    def _cancel(self, request_id: Any) -> None:
        if self._task is None or self._task.done():
            return
        if request_id and self._streaming_id and request_id != self._streaming_id:
            return
        if self._stream is not None:
            self._stream.cancel()
        elif self._remote:
            self._cancel_remote()
        else:
            # The exchange is still opening (or the resume still looking for it): cancelled once it is found.
            self._cancel_requested = True

    def _cancel_remote(self) -> None:
        # One at a time per socket; each is bounded by its own timeouts and finishes even if the socket closes.
        if self._remote_cancel is None or self._remote_cancel.done():
            self._remote_cancel = cancel_elsewhere_later(self._streaming_id, client_id=self.client_id)

    # --- outgoing -----------------------------------------------------------------------------------------

    async def _answer(self, ask: AskInput) -> None:
        drain.transport_started()
        try:
            exchange = await exchange_open(ask)
        except BadRequest as exc:
            await self._refuse(str(exc))
            return
        except Exception as exc:
            logger.exception("could not start a WebSocket answer")
            await self.send_json(transport_error_event("internal", f"internal error ({type(exc).__name__})"))
            return
        stream = stream_open(exchange, on_disconnect=ask.on_disconnect)
        self._stream, self._streaming_id = stream, stream.request_id
        if self._cancel_requested:
            stream.cancel()
        await self._forward(stream.request_id, stream.tail(0), stream, after_seq=0)

    async def _replay(self, request_id: str, last_seq: int) -> None:
        drain.transport_started()
        try:
            resumption = await stream_registry().resume(request_id, client_id=self.client_id, after_seq=last_seq)
        except ResumeRefused as exc:
            await self.send_json(
                transport_error_event(exc.code, exc.message, request_id=request_id, after_seq=last_seq)
            )
            return
        if resumption.complete:
            return  # the client has every event, the terminal one included
        self._stream = resumption.local
        self._remote = resumption.local is None
        if self._cancel_requested:
            self._cancel(None)
        await self._forward(request_id, resumption.events, resumption.local, after_seq=last_seq)

    async def _forward(
        self, request_id: str, events: AsyncGenerator[Event, None], stream: LiveStream | None, *, after_seq: int
    ) -> None:
        ended = False
        last_seq = after_seq
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    await self.send_json(event)
                    last_seq = event["seq"]
                    if event["channel"] in TERMINAL_CHANNELS:
                        ended = True
                        break
        except asyncio.CancelledError:
            if not ended and drain.window_closed():
                # The worker stops: the stream still ends with a terminal event.
                with contextlib.suppress(Exception):
                    event = drain.unavailable_event(request_id=request_id, after_seq=last_seq)
                    await asyncio.wait_for(self.send_json(event), 1.0)
            raise
        except Exception as exc:
            # Reading the stream failed (e.g. Redis went away mid-resume): the client still gets its terminal.
            logger.exception("WebSocket stream %s failed", request_id)
            message = exc.message if isinstance(exc, ResumeRefused) else f"internal error ({type(exc).__name__})"
            await self.send_json(transport_error_event("internal", message, request_id=request_id, after_seq=last_seq))
        finally:
            if not ended and stream is not None:
                stream.transport_lost()

    async def _refuse(self, message: str) -> None:
        await self.send_json(transport_error_event("bad_request", message))

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return event_json(content)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("WebSocket exchange failed: %r", task.exception())
