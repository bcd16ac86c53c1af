"""The request life cycle shared by /v1/chat/completions and /v1/responses.

fault decision -> (429/500/... answered at once) -> stream headers -> FIFO wait for a decode slot ->
prefill -> paced tokens -> terminating events. A client disconnect at any point cancels the work, which frees
the slot (or the queue place) at once; a planned drop closes the TCP connection mid-stream.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from devtools.simulator.asgi_io import (
    SSE_HEADERS,
    ConnectionDropped,
    Receive,
    Scope,
    Send,
    abort_connection,
    error_payload,
    run_until_disconnect,
    send_json,
    send_start,
    sse_event,
)
from devtools.simulator.engine import Engine, Generation, StreamDropped, TokenKind, decode
from devtools.simulator.scheduler import QueueFull


@dataclass
class RequestContext:
    engine: Engine
    scope: Scope
    receive: Receive
    send: Send
    endpoint: str
    arrival: float

    async def send_error(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        headers = [] if retry_after is None else [(b"retry-after", str(retry_after).encode())]
        self.engine.stats.status(self.endpoint, status)
        await send_json(self.send, status, error_payload(status, message), headers)

    async def send_document(self, payload: dict[str, Any]) -> None:
        self.engine.stats.status(self.endpoint, 200)
        await send_json(self.send, 200, payload)


class Responder(ABC):
    """How one endpoint writes a generation: a stream of SSE events, or one JSON document."""

    def __init__(self, ctx: RequestContext, generation: Generation, model: str) -> None:
        self.ctx = ctx
        self.generation = generation
        self.model = model

    async def write(self, data: bytes, *, more: bool = True) -> None:
        await self.ctx.send({"type": "http.response.body", "body": data, "more_body": more})

    async def open_stream(self) -> None:
        """Headers (and any events that precede the first token)."""
        self.ctx.engine.stats.status(self.ctx.endpoint, 200)
        await send_start(self.ctx.send, 200, SSE_HEADERS)
        # Twisted (daphne) only writes the headers with the first body bytes; an empty chunk flushes them
        # so the client sees the stream open while it still waits in the queue, as with vLLM's uvicorn.
        await self.write(b"")

    @abstractmethod
    async def emit(self, kind: TokenKind, token: str) -> None: ...

    @abstractmethod
    async def close_stream(self) -> None:
        """Everything after the last token; must end the body (more_body=False)."""

    @abstractmethod
    def document(self) -> dict[str, Any]:
        """The non-streaming response body."""


async def serve_generation(ctx: RequestContext, responder: Responder, *, stream: bool) -> None:
    engine = ctx.engine
    plan = engine.faults.decide(ctx.endpoint)
    if plan.status is not None:
        message = "Rate limit exceeded (simulated)." if plan.status == 429 else "Simulated server error."
        await ctx.send_error(plan.status, message, retry_after=plan.retry_after)
        return
    try:
        engine.scheduler.check_capacity()
    except QueueFull:
        await ctx.send_error(503, "The waiting queue is full.")
        return

    async def collect(kind: TokenKind, token: str) -> None:
        """Non-streaming: the tokens are already in the Generation; only the pacing matters."""

    async def streamed() -> None:
        try:
            await decode(engine, responder.generation, plan, responder.emit, arrival=ctx.arrival)
        except QueueFull:
            # Only if the queue filled up between the capacity check and the wait (other tasks ran).
            await responder.write(sse_event('{"error":{"message":"The waiting queue is full.","code":"503"}}'))
            await responder.write(b"", more=False)
            raise
        await responder.close_stream()

    async def whole() -> None:
        try:
            await decode(engine, responder.generation, plan, collect, arrival=ctx.arrival)
        except QueueFull:
            await ctx.send_error(503, "The waiting queue is full.")
            raise
        await ctx.send_document(responder.document())

    if stream:
        await responder.open_stream()
    try:
        if not await run_guarded(ctx, streamed() if stream else whole()):
            return
    except QueueFull:
        return
    generation = responder.generation
    engine.stats.completed(
        ctx.endpoint,
        prompt_tokens=generation.prompt_tokens,
        completion_tokens=generation.completion_tokens,
        reason=generation.finish_reason,
    )
    engine.stats.e2e.observe(asyncio.get_running_loop().time() - ctx.arrival)


async def run_guarded(ctx: RequestContext, work: Coroutine[Any, Any, None]) -> bool:
    """Run a request's work under the disconnect watcher; count aborts and drops. True if it completed."""
    engine = ctx.engine
    try:
        aborted = await run_until_disconnect(
            ctx.receive, work, on_disconnect=lambda: engine.stats.aborted(ctx.endpoint)
        )
    except StreamDropped:
        engine.stats.dropped(ctx.endpoint)
        if not abort_connection(ctx.scope):
            raise ConnectionDropped("simulated connection drop") from None
        return False
    return not aborted
