"""What telemetry records about one request while it runs, and the finished, immutable form handed to the exporter.

Everything here runs on the event loop, so it only appends to lists and reads clocks: no I/O, no locks, no SDK.
Times are wall-clock nanoseconds (`time.time_ns()`), which is what an exported span needs; durations measured by
the engine (`perf_counter`) are kept as milliseconds beside them.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from rag.errors import PipelineAbort
from rag.state import PipelineState, Usage

# How much of a question an unsampled request's summary keeps: enough to recognise it next to a score.
SUMMARY_QUESTION_CHARS = 500


def trace_id_for(request_id: str) -> str:
    """The Langfuse trace id of a request: 32 hex, the same as `Langfuse.create_trace_id(seed=request_id)`.

    Derived rather than stored, so any worker can name the trace of any request (feedback arrives later and
    possibly elsewhere) without importing the SDK.
    """
    return hashlib.sha256(request_id.encode("utf-8")).digest()[:16].hex()


def client_ref_for(client_id: str) -> str:
    """What Langfuse sees of a client: a one-way hash, since the client id itself is a bearer token."""
    if not client_id:
        return ""
    return hashlib.sha256(("client:" + client_id).encode("utf-8")).hexdigest()[:16]


def usage_tokens(usage: Usage | Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(input, output, total) tokens of a call's usage, of a usage mapping as stored or streamed, or of nothing."""
    if usage is None:
        return (0, 0, 0)
    if isinstance(usage, Usage):
        return (usage.input_tokens, usage.output_tokens, usage.total_tokens)
    return (
        int(usage.get("input_tokens", 0)),
        int(usage.get("output_tokens", 0)),
        int(usage.get("total_tokens", 0)),
    )


@dataclass(slots=True)
class NodeSpan:
    """One node's run. Written only until the record is finished; after that the exporter thread reads it."""

    node: str
    start_ns: int
    # None: still running when the request ended (the telemetry node that called `finish`, or the node that
    # failed or was cancelled); the exporter ends it at the request's end.
    ms: float | None = None
    route: str = ""


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    node: str
    model: str
    input_tokens: int
    output_tokens: int
    total_tokens: int
    start_ns: int
    end_ns: int
    first_token_ns: int | None = None
    operation: str = ""
    error: str = ""
    # Index in the trace's node spans of the node that was running when the call was made (None: none was). A
    # call's `node` is the backend's label for it, which is not always the running node's id (the conversation
    # summary is labelled `conversation_summarizer` but made by `response_synth`).
    span_index: int | None = None


class TraceRecord:
    """One request's events, collected in memory: the engine's `RunObserver` and the LLM backend's sink."""

    __slots__ = ("finished", "generations", "request_id", "sampled", "spans", "start_ns", "trace_id")

    def __init__(self, request_id: str, trace_id: str, sampled: bool) -> None:
        self.request_id = request_id
        self.trace_id = trace_id
        self.sampled = sampled
        self.start_ns = time.time_ns()
        self.spans: list[NodeSpan] = []
        self.generations: list[GenerationRecord] = []
        self.finished = False

    # --- RunObserver (rag.engine.graph): the engine runs one node at a time, so the open span is the last one.
    def node_started(self, node_id: str) -> None:
        self.spans.append(NodeSpan(node_id, time.time_ns()))

    def node_finished(self, node_id: str, route: str, ms: float) -> None:
        if self.finished:  # the telemetry node ends after it called `finish`: its span is already handed over
            return
        span = self.spans[-1] if self.spans else None
        if span is not None and span.node == node_id:
            span.ms = ms
            span.route = route

    def running_span_index(self) -> int | None:
        """The span of the node running now: the last one started, unless it has ended."""
        if self.spans and self.spans[-1].ms is None:
            return len(self.spans) - 1
        return None

    # --- the LLM backend's side, through `report_generation`
    def add_generation(self, generation: GenerationRecord) -> None:
        if not self.finished:
            self.generations.append(generation)


# The record of the request running in this task. Set by `Telemetry.begin` inside the run's own task, so it
# never leaks into the transport's context; tasks the nodes spawn (parallel retrieval) inherit it.
current_trace: ContextVar[TraceRecord | None] = ContextVar("rag_current_trace", default=None)


def generation_error(exc: BaseException) -> str:
    """How a failed LLM call reads on its generation: the pipeline's error code and message when it carries
    them (Busy, UpstreamTimeout, UpstreamError), else the exception's type and text."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, PipelineAbort):
        return f"{exc.code}: {exc.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def report_generation(
    *,
    node: str,
    model: str,
    usage: Usage | Mapping[str, int] | None,
    started: float,
    ended: float | None = None,
    first_token_at: float | None = None,
    operation: str = "",
    error: str = "",
) -> None:
    """Called by the LLM backend once per finished call, failed ones with `error` (see `generation_error`).
    `started`/`ended`/`first_token_at` are `time.time()`.

    Costs one ContextVar read when the request is not being recorded (telemetry off).
    """
    record = current_trace.get()
    if record is None:
        return
    input_tokens, output_tokens, total_tokens = usage_tokens(usage)
    record.add_generation(
        GenerationRecord(
            node=node,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=total_tokens or input_tokens + output_tokens,
            start_ns=int(started * 1e9),
            end_ns=time.time_ns() if ended is None else int(ended * 1e9),
            first_token_ns=None if first_token_at is None else int(first_token_at * 1e9),
            operation=operation,
            error=error,
            span_index=record.running_span_index(),
        )
    )


@dataclass(frozen=True, slots=True)
class FinishedTrace:
    """A finished request as the exporter sends it; with `answer=None` it is the compact summary of an unsampled
    request, kept so its trace can still be created if feedback arrives for it."""

    request_id: str
    trace_id: str
    start_ns: int
    end_ns: int
    question: str
    answer: str | None
    answer_chars: int
    status: str  # "ok" or an error code
    error_message: str = ""
    backend: str = ""
    language: str = ""
    intent: str = ""
    conversation_id: str = ""
    client_id: str = ""  # hashed by the exporter (off the event loop) before it leaves the process
    search_query: str = ""
    loops: int = 0
    cached: bool = False
    sources: tuple[str, ...] = ()
    usage: tuple[int, int, int] = (0, 0, 0)
    nodes: tuple[NodeSpan, ...] = ()
    generations: tuple[GenerationRecord, ...] = ()
    rebuilt_from: str = ""  # "" for a live trace; "memory" or "messages" for one created when feedback came

    @property
    def latency_ms(self) -> float:
        return round((self.end_ns - self.start_ns) / 1e6, 1)

    def compact(self) -> FinishedTrace:
        return replace(self, answer=None, question=self.question[:SUMMARY_QUESTION_CHARS], sources=())


def finished_trace_from_state(record: TraceRecord, state: PipelineState, *, status: str, message: str) -> FinishedTrace:
    """Freeze a record (marks it finished, so the loop stops writing to the spans it shares with the result).

    Runs on the event loop once per request: only field copies here; hashing and span arithmetic happen in the
    exporter's thread.
    """
    record.finished = True
    return FinishedTrace(
        request_id=record.request_id,
        trace_id=record.trace_id,
        start_ns=record.start_ns,
        end_ns=time.time_ns(),
        question=state.question,
        answer=state.answer,
        answer_chars=len(state.answer),
        status=status,
        error_message=message,
        backend=state.backend,
        language=state.language,
        intent=state.intent,
        conversation_id=state.conversation_id,
        client_id=state.client_id,
        search_query=state.search_query,
        loops=state.loops,
        cached=state.cache_hit is not None,
        sources=tuple(source.doc_id for source in state.sources),
        usage=usage_tokens(state.usage),
        nodes=tuple(record.spans),
        generations=tuple(record.generations),
    )


def trace_summary_from_exchange(
    *,
    request_id: str,
    question: str,
    answer_chars: int,
    finished_at: datetime,
    latency_ms: int | None,
    usage: Mapping[str, Any] | None = None,
    status: str = "ok",
    backend: str = "",
    language: str = "",
    intent: str = "",
    conversation_id: str = "",
    client_id: str = "",
) -> FinishedTrace:
    """The compact summary rebuilt from what the chat stored (its messages), for a request whose summary is no
    longer in this worker's memory (answered by another worker, or before a restart)."""
    end_ns = int(finished_at.timestamp() * 1e9)
    start_ns = end_ns - int((latency_ms or 0) * 1e6)
    return FinishedTrace(
        request_id=request_id,
        trace_id=trace_id_for(request_id),
        start_ns=start_ns,
        end_ns=end_ns,
        question=question[:SUMMARY_QUESTION_CHARS],
        answer=None,
        answer_chars=answer_chars,
        status=status,
        backend=backend,
        language=language,
        intent=intent,
        conversation_id=conversation_id,
        client_id=client_id,
        usage=usage_tokens(usage),
        rebuilt_from="messages",
    )


ScoreDataType = Literal["BOOLEAN", "NUMERIC"]


@dataclass(frozen=True, slots=True)
class ScoreRecord:
    """A score for a request's trace (user feedback). `score_id` is stable per feedback so an update overwrites."""

    request_id: str
    trace_id: str
    name: str
    value: float
    data_type: ScoreDataType
    score_id: str
    comment: str | None = None
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ScoreJob:
    """What the exporter receives for a score."""

    score: ScoreRecord
    # The trace to create first, because it was never exported (unsampled, or dropped when the queue was full):
    # Langfuse drops a score whose trace it does not know.
    trace: FinishedTrace | None
