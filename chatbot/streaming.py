"""One chat exchange: check the input, load history once, stream the pipeline, record the answer once.

Transports (WebSocket, SSE, the `ask` command) are thin: they parse their framing, call `exchange_open`, and
forward `exchange.events()` as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from chatbot.clientaddr import client_origin_var
from chatbot.logcontext import conversation_id_var, request_id_var
from chatbot.recording import exchange_recorder, failure_words
from chatbot.services import ConversationContext, UnknownConversation, conversation_context_get, exchange_record
from chatbot.summaries import summary_settled, summary_write_later
from infra.jsonio import JsonInputError, json_check
from rag.events import SOURCE, TERMINAL_CHANNELS, Event
from rag.provider import get_runtime
from rag.questions import question_too_long
from rag.runtime import BACKENDS, AskRequest, PipelineRun
from rag.values import Turn

logger = logging.getLogger(__name__)

# Errors that mean "the question was not taken": nothing is written for them.
NOT_RECORDED = frozenset({"bad_request", "blocked", "busy"})
# What happens to an answer when its transport goes away: `cancel` frees the LLM slot at once (a plain close
# means nobody is waiting); `continue` finishes it and keeps its events for a client that comes back to resume.
DISCONNECT_POLICIES = ("cancel", "continue")
_background: set[asyncio.Task[Any]] = set()
# How long the terminal event waits for the exchange to be written, so that when a client sees the answer end its
# conversation is already listed and its message can take feedback. Past this the event goes out anyway.
RECORD_BEFORE_TERMINAL_WAIT = 5.0


class BadRequest(ValueError):
    """Input that cannot be served; the message names what was wrong."""


@dataclass(frozen=True, slots=True)
class AskInput:
    question: str
    backend: str
    conversation_id: str
    client_id: str
    on_disconnect: str = "cancel"
    # A client that carries its conversation itself (the OpenAI API sends every turn): nothing stored is read, and
    # the exchange is recorded as a new conversation.
    history: tuple[Turn, ...] | None = None
    # Whether the pipeline's per-client rate limit applies (False: the caller limited it already, e.g. by API key).
    client_rate_limited: bool = True
    # Whether a failed answer LLM may give a degraded answer from the passages (the chat page) or must end with its
    # error (the OpenAI API, whose clients retry on 429/503/504).
    degraded_allowed: bool = True
    # A client's background task (a title, follow-up suggestions): recorded, but never counted as a question.
    background: bool = False


def ask_input_parse(payload: Any, *, backend: str | None, client_id: str) -> AskInput:
    """Check a decoded JSON request body. `backend` is fixed by the endpoint, or read from the payload."""
    if not isinstance(payload, dict):
        raise BadRequest("request body must be a JSON object")
    try:
        json_check(payload)  # text no encoder or database accepts (lone surrogates, NUL), absurd nesting
    except JsonInputError as exc:
        raise BadRequest(f"'{exc.field}' {exc.message}") from None
    question = payload.get("question")
    if question is None:
        raise BadRequest("'question' is required")
    if not isinstance(question, str):
        raise BadRequest(f"'question' must be a string, not {type(question).__name__}")
    if not question.strip():
        raise BadRequest("'question' is empty")
    if too_long := question_too_long(question):
        raise BadRequest(too_long)
    conversation_id = payload.get("conversation_id") or ""
    if not isinstance(conversation_id, str):
        raise BadRequest(f"'conversation_id' must be a string, not {type(conversation_id).__name__}")
    if backend is None:
        backend = payload.get("backend") or "chat"
        if backend not in BACKENDS:
            raise BadRequest(f"'backend' must be one of {', '.join(BACKENDS)}, not {backend!r}")
    on_disconnect = payload.get("on_disconnect") or "cancel"
    if on_disconnect not in DISCONNECT_POLICIES:
        raise BadRequest(f"'on_disconnect' must be 'cancel' or 'continue', not {on_disconnect!r}")
    return AskInput(
        question=question,
        backend=backend,
        conversation_id=conversation_id,
        client_id=client_id,
        on_disconnect=on_disconnect,
    )


def transport_error_event(code: str, message: str, *, request_id: str | None = None, after_seq: int = 0) -> Event:
    """A terminal `error` event made outside the pipeline (a transport, the stream relay), in its schema.

    For a request refused before the pipeline ran it is a one-event stream (seq 1, new request id); for a stream
    that broke off (`after_seq` events sent) it continues the numbering, so the stream still ends with one terminal.
    """
    return {
        "source": SOURCE,
        "request_id": request_id or uuid.uuid4().hex,
        "seq": after_seq + 1,
        "node": "transport",
        "channel": "error",
        "stage": "error",
        "code": code,
        "message": message,
    }


class ChatExchange:
    def __init__(self, ask: AskInput, run: PipelineRun, *, conversation_id: str) -> None:
        self.ask = ask
        self.run = run
        self.conversation_id = conversation_id
        self.request_id = run.request_id
        self._answer: list[str] = []
        self.recorded: asyncio.Task[Any] | None = None

    def cancel(self) -> None:
        self.run.cancel("cancelled by the client")

    def interrupt(self, code: str, message: str, **payload: Any) -> None:
        """Stop the answer for a reason of the server's; its terminal event is the `error` `code`."""
        self.run.cancel(message, code=code, **payload)

    async def events(self) -> AsyncGenerator[Event, None]:
        request_token = request_id_var.set(self.request_id)
        conversation_token = conversation_id_var.set(self.conversation_id)
        try:
            # aclosing: when our consumer stops early, the run's iterator is closed now (cancelling the pipeline),
            # not whenever garbage collection gets to it.
            async with contextlib.aclosing(self.run.events()) as events:
                async for event in events:
                    if event["channel"] == "answer":
                        self._answer.append(event["delta"])
                    elif event["channel"] in TERMINAL_CHANNELS:
                        await self._recorded_before_terminal()
                    yield event
        finally:
            self._record_later()  # before the reset: the recording task's log lines carry the ids too
            request_id_var.reset(request_token)
            conversation_id_var.reset(conversation_token)

    async def _recorded_before_terminal(self) -> None:
        self._record_later()
        if self.recorded is None:
            return
        # shield: a client going away now must not cancel the write; errors are logged by `_record_done`.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.recorded), timeout=RECORD_BEFORE_TERMINAL_WAIT)

    def _record_later(self) -> None:
        """Write the exchange once, even when our task is being cancelled (the write runs on its own)."""
        outcome = self.run.outcome()
        code = outcome.error_code
        if code in NOT_RECORDED or self.recorded is not None:
            return
        status = "ok" if not code else ("cancelled" if code == "cancelled" else "failed")
        task = asyncio.create_task(
            exchange_recorder().run(
                exchange_record,
                conversation_id=self.conversation_id,
                client_id=self.ask.client_id,
                question=self.ask.question,
                answer="".join(self._answer),
                request_id=self.request_id,
                status=status,
                outcome=outcome,
                background=self.ask.background,
            ),
            name=f"record-{self.request_id}",
        )
        _background.add(task)
        task.add_done_callback(_record_done)
        self.recorded = task
        # the model's summary after the terminal event; a client carrying its history (the API) reads none
        if outcome.summary_job is not None and self.ask.history is None:
            summary_write_later(self.conversation_id, self.request_id, outcome.summary_job, task)


def _record_done(task: asyncio.Task[Any]) -> None:
    _background.discard(task)
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.error("recording exchange %s: %r", failure_words(exc), exc)


async def exchange_open(ask: AskInput) -> ChatExchange:
    """Load the conversation (one DB hop, unless the client sent its history) and start the pipeline. Raises
    BadRequest for an unknown id."""
    if ask.history is not None:
        context = ConversationContext(str(uuid.uuid4()), exists=False, history=ask.history, summary="")
    elif not ask.conversation_id:
        # a new conversation: nothing to read, so no thread hop (nothing is written until the answer is recorded)
        context = ConversationContext(str(uuid.uuid4()), exists=False, history=(), summary="")
    else:
        await summary_settled(ask.conversation_id)
        try:
            # on the recording thread's kept connection, queued after the writes of the turns before
            context = await exchange_recorder().run(
                conversation_context_get, conversation_id=ask.conversation_id, client_id=ask.client_id
            )
        except UnknownConversation as exc:
            raise BadRequest(str(exc)) from None
    # Set by chatbot.clientaddr.ClientOriginMiddleware for a connection to the server; None for the `ask` command.
    # A caller limited otherwise (an API key's own rate) is not limited by client or address here.
    origin = client_origin_var.get() if ask.client_rate_limited else None
    request = AskRequest(
        question=ask.question,
        backend=ask.backend,
        conversation_id=context.conversation_id,
        # The guard limits a client id (and an address); an empty one is not limited there.
        client_id=ask.client_id if ask.client_rate_limited else "",
        client_address=origin.address if origin else "",
        client_identified=origin.identified if origin else True,
        history=context.history,
        summary=context.summary,
        degraded_allowed=ask.degraded_allowed,
    )
    # The pipeline's task copies the context when it is created (in start): the ids must be set by then, or
    # every log line of the pipeline says [req=- conv=-].
    request_token = request_id_var.set(request.request_id)
    conversation_token = conversation_id_var.set(context.conversation_id)
    try:
        run = await get_runtime().start(request)
    finally:
        request_id_var.reset(request_token)
        conversation_id_var.reset(conversation_token)
    return ChatExchange(ask, run, conversation_id=context.conversation_id)


async def pending_records(max_wait: float = 5.0) -> None:
    """Wait for exchange writes still in flight (tests, shutdown)."""
    if _background:
        await asyncio.wait(set(_background), timeout=max_wait)
