"""The event schema and the writer through which nodes emit events.

Each event is one JSON object: {"source": "ask_stream", "request_id", "seq", "node", "channel", "stage", ...}.
`seq` counts 1, 2, 3 ... per stream with no gaps; every stream ends with exactly one terminal event
(`meta_summary`, or `error` with a code). The writer enforces both, whatever the nodes do.

With `Coalescing`, the writer merges the `answer` (and `reasoning`) deltas of a node into frames: a delta after a
quiet `window` goes out at once (so the first token is never held back), later ones wait until the window since
the last frame has passed or `max_chars` have gathered. Everything downstream (the relay, Redis, JSON, the socket)
then pays per frame, not per token, and a page still updates some 25 times a second.

The schema is typed: `PipelineEvent` is the union of one TypedDict per channel (`StatusEvent`, `AnswerEvent`,
`ReasoningEvent`, `UsageEvent`, `SummaryEvent`, `ErrorEvent`), told apart by `channel`. The writer's methods take
their payloads as those TypedDicts' fields (`StatusPayload`, `UsagePayload`, `Summary`, `ErrorPayload`), so
mypy checks what every emitter passes; tests/rag/pipeline/test_event_schema.py checks every event a real run emits
against the union. What travels (`Event`) stays a plain dict: transports only forward it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Unpack

# typing_extensions' TypedDict: pydantic (which checks events against these types in the tests) reads its
# annotations on Python 3.11, where typing's does not keep enough of them
from typing_extensions import TypedDict

SOURCE = "ask_stream"
CHANNELS = ("status", "answer", "reasoning", "meta", "meta_summary", "error")
TERMINAL_CHANNELS = frozenset({"meta_summary", "error"})

Event = dict[str, Any]

Channel = Literal["status", "answer", "reasoning", "meta", "meta_summary", "error"]


class StatusPayload(TypedDict, total=False):
    """What a `status` event may carry besides the envelope, grouped by who sends it."""

    # the engine, around each node: `start`, then `end` with the route taken and the node's time
    route: str
    ms: float
    # planner (`plan`)
    intent: str
    should_retrieve: bool
    followup_instruction: str
    plan_source: str
    adjusted: list[str]
    # language normaliser (`translate`) and follow-up transform (`prepare`)
    source_language: str
    target_language: str
    translated: bool
    mode: str
    # query builder (`rewrite`, `retry`)
    loop: int
    strategy: str
    query_source: str
    # tool executor (`tool`)
    tool: str
    queries: list[str]
    kind: str
    language: str
    hits: int
    failed: int
    fallback: str  # why the search ran on BM25 alone (rag.deps.SearchReport), "" when it did not
    # response synthesis (`generate`)
    task: str
    answer_source: str
    sources: int
    degraded: bool
    mid_answer: bool  # a degraded answer finishing one the model broke off
    # any node that fell back to the offline rules: the error's code, and what went wrong (the planner)
    fallback_reason: str
    detail: str


class UsageCounts(TypedDict):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    # Present (true) when some of the counts were not reported by the server but counted by us: with the server's
    # tokenizer endpoint where it has one, else estimated from the text (rag.llm.tokens).
    estimated: NotRequired[bool]


class UsagePayload(TypedDict, total=False):
    call: str  # which of the node's LLM calls


class Attachment(TypedDict):
    name: str
    url: str
    media_type: str


class Summary(TypedDict, total=False):
    """The terminal `meta_summary` event's payload. A pipeline run's summary (rag.runtime.PipelineRun.summary)
    carries every field; a bare graph run (tests, benchmarks) may finish with fewer."""

    conversation_id: str
    backend: str
    language: str
    intent: str
    search_query: str
    loops: int
    tools: list[str]
    cached: bool
    curated: bool
    degraded: bool
    retrieval_fallback: str  # "" or why a search ran on BM25 alone (the embedder failed): rag.deps.SearchReport
    # what became of the question (rag.outcome.OUTCOMES) and the best retrieval score seen (None: no search ran)
    outcome: str
    best_score: float | None
    skipped: list[dict[str, str]]  # auxiliary steps skipped for want of a slot: rag.state.SkippedStep.as_dict()
    sources: list[dict[str, Any]]  # rag.values.Source.as_dict(): ref, doc_id, title, url, and optional keys
    attachments: list[Attachment]
    usage: UsageCounts
    trace_id: str | None
    elapsed_ms: float


class ErrorPayload(TypedDict, total=False):
    retry_after: float  # seconds a client should wait before asking again (busy, unavailable)


class _Envelope(TypedDict):
    source: Literal["ask_stream"]
    request_id: str
    seq: int
    node: str


class StatusEvent(_Envelope, StatusPayload):
    channel: Literal["status"]
    stage: str


class AnswerEvent(_Envelope):
    channel: Literal["answer"]
    stage: Literal["delta"]
    delta: str


class ReasoningEvent(_Envelope):
    channel: Literal["reasoning"]
    stage: Literal["delta"]
    delta: str


class UsageEvent(_Envelope, UsagePayload):
    channel: Literal["meta"]
    stage: Literal["usage"]
    usage: UsageCounts


class SummaryEvent(_Envelope, Summary):
    channel: Literal["meta_summary"]
    stage: Literal["final"]


class ErrorEvent(_Envelope, ErrorPayload):
    channel: Literal["error"]
    stage: Literal["error"]
    code: str
    message: str


PipelineEvent = StatusEvent | AnswerEvent | ReasoningEvent | UsageEvent | SummaryEvent | ErrorEvent
EVENT_TYPES: dict[str, type[Any]] = {
    "status": StatusEvent,
    "answer": AnswerEvent,
    "reasoning": ReasoningEvent,
    "meta": UsageEvent,
    "meta_summary": SummaryEvent,
    "error": ErrorEvent,
}


class StreamClosed(Exception):
    """Raised when a node emits after the stream's terminal event."""


class EventChannel:
    """A single-producer, single-consumer event buffer.

    Ordinary events are bounded: a producer that gets `max_pending` events ahead of its consumer waits (at most
    `put_timeout` seconds) so a stalled client slows its own pipeline instead of growing memory. The terminal
    event never waits, so a run can always finish even when nobody reads.
    """

    __slots__ = ("_closed", "_items", "_max_pending", "_put_timeout", "_readable", "_space")

    def __init__(self, *, max_pending: int = 512, put_timeout: float = 30.0) -> None:
        self._items: deque[Event] = deque()
        self._readable = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._max_pending = max_pending
        self._put_timeout = put_timeout
        self._closed = False

    @property
    def full(self) -> bool:
        return len(self._items) >= self._max_pending

    def put_nowait(self, event: Event) -> None:
        """Append without waiting; the caller checks `full` first (the bound is its to keep)."""
        self._items.append(event)
        self._readable.set()

    async def put(self, event: Event) -> None:
        if len(self._items) >= self._max_pending:
            self._space.clear()
            await asyncio.wait_for(self._space.wait(), self._put_timeout)
        self._items.append(event)
        self._readable.set()

    def put_terminal(self, event: Event) -> None:
        self._items.append(event)
        self._closed = True
        self._readable.set()

    async def get(self, max_wait: float) -> Event:
        """The next event; TimeoutError after `max_wait` seconds without one."""
        while not self._items:
            self._readable.clear()
            await asyncio.wait_for(self._readable.wait(), max_wait)
        event = self._items.popleft()
        if len(self._items) < self._max_pending:
            self._space.set()
        return event

    @property
    def closed(self) -> bool:
        return self._closed


@dataclass(frozen=True, slots=True)
class Coalescing:
    """How the writer merges text deltas into frames: at most one frame per `window` seconds (after a quiet
    window the next delta goes out at once), or sooner once `max_chars` characters are waiting."""

    window: float = 0.04
    max_chars: int = 256


CallLater = Callable[[float, Callable[[], None]], Any]


class StreamWriter:
    """Numbers events, stamps them with the request id, and closes the stream exactly once.

    With `coalescing`, text deltas are merged (see the module's docstring); any other event, and the terminal
    one, first sends the text still waiting, so the order of the stream is the order of the emits. `clock` and
    `call_later` (a flush after the window when no further delta comes) are injectable for tests.
    """

    __slots__ = (
        "_call_later",
        "_channel",
        "_clock",
        "_coalescing",
        "_last_frame",
        "_pending",
        "_pending_chars",
        "_pending_key",
        "_seq",
        "_timer",
        "request_id",
        "terminal",
    )

    def __init__(
        self,
        request_id: str,
        channel: EventChannel,
        *,
        coalescing: Coalescing | None = None,
        clock: Callable[[], float] = time.monotonic,
        call_later: CallLater | None = None,
    ) -> None:
        self.request_id = request_id
        self._channel = channel
        self._seq = 0
        self.terminal: Event | None = None
        self._coalescing = coalescing if coalescing is not None and coalescing.window > 0 else None
        self._clock = clock
        self._call_later = call_later
        self._pending: list[str] = []
        self._pending_chars = 0
        self._pending_key: tuple[str, Channel] = ("", "answer")
        self._last_frame = -math.inf
        self._timer: Any = None

    def _make(self, node: str, channel: Channel, stage: str, payload: Mapping[str, Any]) -> Event:
        if self.terminal is not None:
            raise StreamClosed(f"stream {self.request_id} already ended with {self.terminal['channel']}")
        self._seq += 1
        event = {
            "source": SOURCE,
            "request_id": self.request_id,
            "seq": self._seq,
            "node": node,
            "channel": channel,
            "stage": stage,
        }
        if payload:
            event.update(payload)
        return event

    # --- text deltas, merged into frames ---------------------------------------------------------------------

    async def _text(self, node: str, channel: Channel, delta: str) -> None:
        coalescing = self._coalescing
        if coalescing is None:
            await self._channel.put(self._make(node, channel, "delta", {"delta": delta}))
            return
        key = (node, channel)
        if self._pending and self._pending_key != key:
            await self._flush()
        now = self._clock()
        if not self._pending and now - self._last_frame >= coalescing.window:
            self._last_frame = now  # the first delta, or the first after a pause: at once
            await self._channel.put(self._make(node, channel, "delta", {"delta": delta}))
            return
        self._pending.append(delta)
        self._pending_chars += len(delta)
        self._pending_key = key
        if self._pending_chars >= coalescing.max_chars or now - self._last_frame >= coalescing.window:
            await self._flush()
        elif self._timer is None:
            call_later = self._call_later or asyncio.get_running_loop().call_later
            self._timer = call_later(self._last_frame + coalescing.window - now, self._flush_due)

    def _take_frame(self) -> Event | None:
        """The waiting text as one event (None when nothing waits); the timer is no longer needed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending or self.terminal is not None:
            return None
        node, channel = self._pending_key
        text = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        self._last_frame = self._clock()
        return self._make(node, channel, "delta", {"delta": text})

    async def _flush(self) -> None:
        frame = self._take_frame()
        if frame is not None:
            await self._channel.put(frame)

    def _flush_due(self) -> None:
        """The window passed with no further delta: send what waits, unless the reader is behind (then the next
        emit sends it, waiting for space as every emit does, so the channel's bound holds)."""
        self._timer = None
        if self._pending and not self._channel.full:
            frame = self._take_frame()
            if frame is not None:
                self._channel.put_nowait(frame)

    def _flush_now(self) -> None:
        # Before a terminal event, which never waits: the text waiting goes just before it.
        frame = self._take_frame()
        if frame is not None:
            self._channel.put_nowait(frame)

    # --- emitting ---------------------------------------------------------------------------------------------

    async def emit(self, node: str, channel: Channel, stage: str, **payload: Unpack[StatusPayload]) -> None:
        await self._flush()
        await self._channel.put(self._make(node, channel, stage, payload))

    async def status(self, node: str, stage: str, **payload: Unpack[StatusPayload]) -> None:
        await self._flush()
        await self._channel.put(self._make(node, "status", stage, payload))

    async def answer(self, node: str, delta: str) -> None:
        await self._text(node, "answer", delta)

    async def reasoning(self, node: str, delta: str) -> None:
        await self._text(node, "reasoning", delta)

    async def usage(self, node: str, usage: UsageCounts, **payload: Unpack[UsagePayload]) -> None:
        await self._flush()
        await self._channel.put(self._make(node, "meta", "usage", {"usage": usage, **payload}))

    def finish(self, summary: Summary) -> Event:
        """The success terminal event; returns it."""
        self._flush_now()
        event = self._make("END", "meta_summary", "final", summary)
        self.terminal = event
        self._channel.put_terminal(event)
        return event

    def fail(self, code: str, message: str, *, node: str = "END", **payload: Unpack[ErrorPayload]) -> Event:
        """The error terminal event; a second terminal is ignored (the first one stands)."""
        if self.terminal is not None:
            return self.terminal
        self._flush_now()
        event = self._make(node, "error", "error", {"code": code, "message": message, **payload})
        self.terminal = event
        self._channel.put_terminal(event)
        return event

    @property
    def seq(self) -> int:
        return self._seq
