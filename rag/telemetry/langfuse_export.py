"""The only code that talks to the Langfuse SDK.

`LangfuseWriter` turns finished requests into OpenTelemetry spans through the SDK, whose own batch processor
exports them (OTLP over HTTP to `{host}/api/public/otel/v1/traces`) from its own thread; scores go through the
SDK's score thread (`POST {host}/api/public/scores`). It is blocking, CPU-bound work, so it never runs on the
event loop: `LangfuseExporter` feeds it from a bounded queue on a background thread, and
`rag.telemetry.process_export` from a bounded queue in a child process (which also keeps its CPU off this
process's GIL). The request path only ever does a non-blocking `put_nowait`; a full queue drops and counts.

Imported only when telemetry is configured: without keys the SDK is never loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
from datetime import UTC, datetime
from typing import Any

from langfuse import Langfuse
from langfuse import LangfuseOtelSpanAttributes as _A
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Status, StatusCode

from infra.writer_thread import WriterThread
from rag.telemetry.record import FinishedTrace, GenerationRecord, ScoreJob, ScoreRecord, client_ref_for

logger = logging.getLogger(__name__)

TRACE_NAME = "rag.ask"


class _ReplayIds(IdGenerator):
    """Span and trace ids chosen by the exporter for the span it is about to start.

    A trace must carry the id derived from its request id (so a later score finds it), and every span gets an id
    derived from its trace and position, so exporting the same request twice (a trace re-created for a second
    feedback) updates the same observations instead of duplicating them. Only the writer starts spans on this
    provider, from one thread; the thread-local keeps that true even if someone else ever does.
    """

    def __init__(self) -> None:
        self._next = threading.local()

    def use(self, *, span_id: int, trace_id: int | None = None) -> None:
        self._next.span_id = span_id
        self._next.trace_id = trace_id

    def generate_span_id(self) -> int:
        value = getattr(self._next, "span_id", None)
        self._next.span_id = None
        return value or random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        value = getattr(self._next, "trace_id", None)
        self._next.trace_id = None
        return value or random.getrandbits(128) or 1


def _span_id(trace_id: str, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{trace_id}:{key}".encode()).digest()[:8], "big") or 1


class LangfuseWriter:
    """The SDK side: blocking and CPU-bound, called from one thread that is not the event loop's."""

    def __init__(
        self,
        *,
        public_key: str,
        secret_key: str,
        host: str,
        flush_at: int | None = None,
        flush_interval: float | None = None,
        timeout: int | None = None,
        environment: str | None = None,
        release: str | None = None,
    ) -> None:
        self.public_key = public_key
        self._ids = _ReplayIds()
        # A provider of our own: the SDK would otherwise install its provider as the process-wide OpenTelemetry
        # one. ALWAYS_ON because sampling is decided per request before anything reaches the writer (the SDK's
        # own ratio sampler would also silently drop scores of the traces it sampled out).
        self._provider = TracerProvider(sampler=ALWAYS_ON, id_generator=self._ids)
        self._client = Langfuse(
            public_key=public_key,
            secret_key=secret_key,
            base_url=host.rstrip("/"),
            timeout=timeout,
            flush_at=flush_at,
            flush_interval=flush_interval,
            environment=environment or None,
            release=release or None,
            sample_rate=1.0,
            tracer_provider=self._provider,
        )
        # `start_observation` has no start time, but these spans are replayed after the request ended: they are
        # started on the SDK's own tracer (scope "langfuse-sdk" with this public key, which its span processor
        # exports) with the recorded times.
        self._tracer = self._client._otel_tracer
        self._timeout_ms = (timeout or 5) * 1000
        self._environment = environment or ""
        self._release = release or ""
        # Export from this thread every half batch. Left to itself, this writer outruns the SDK's exporter thread
        # under load, and the SDK then drops spans at random once its queue (2048 spans) is full, leaving partial
        # traces. Exporting here instead makes a busy writer slower, which pushes back on the bounded queue in
        # front of it: that one drops whole requests, and counts them.
        self._flush_every = max(1, (flush_at or 512) // 2)
        self._unflushed_spans = 0
        self.exported_traces = 0
        self.rebuilt_traces = 0
        self.scores_sent = 0

    def handle(self, item: FinishedTrace | ScoreJob) -> None:
        if isinstance(item, ScoreJob):
            self.send_score(item)
        else:
            self.export(item)
            self.exported_traces += 1
            self._unflushed_spans += 1 + len(item.nodes) + len(item.generations)
            if self._unflushed_spans >= self._flush_every:
                self._unflushed_spans = 0
                self._provider.force_flush(self._timeout_ms)

    def export(self, trace: FinishedTrace) -> None:
        """One request as spans on the SDK's tracer: a root per request, a child per node, a generation per LLM
        call, with the recorded times and ids derived from the trace (see `_ReplayIds`).

        The attributes are the SDK's own (`LangfuseOtelSpanAttributes`, encoded as the SDK encodes them) passed
        to `start_span` in one go rather than through the SDK's observation wrappers: those scan every value for
        media, mask it and check limits attribute by attribute, which measured about 3x the CPU per trace, CPU
        this thread takes from the event loop under the GIL. The SDK's span processor still filters, batches and
        exports them (OTLP) on its own thread.
        """
        tracer, ids = self._tracer, self._ids
        failed = trace.status != "ok"
        common = self._trace_attributes(trace)
        # An explicit "no parent" context: the root must be a root even if this thread had a span active.
        root_context = otel_trace.set_span_in_context(otel_trace.INVALID_SPAN, otel_context.get_current())
        root_attributes = {
            **common,
            _A.OBSERVATION_TYPE: "span",
            _A.OBSERVATION_INPUT: _json({"question": trace.question}),
            _A.OBSERVATION_OUTPUT: _json(
                {"answer": trace.answer} if trace.answer is not None else {"answer_chars": trace.answer_chars}
            ),
            **_metadata(_A.OBSERVATION_METADATA, _root_metadata(trace)),
        }
        ids.use(trace_id=int(trace.trace_id, 16), span_id=_span_id(trace.trace_id, "root"))
        root = tracer.start_span(
            TRACE_NAME, context=root_context, start_time=trace.start_ns, attributes=root_attributes
        )
        if failed:
            _mark_failed(root, trace.error_message or trace.status)
        in_root = otel_trace.set_span_in_context(root)

        node_spans: list[tuple[Any, int, int, str]] = []
        for index, node in enumerate(trace.nodes):
            # A span without a duration was still running when the request ended: the telemetry node that
            # called `finish` (fine), or the node that failed or was cancelled.
            still_running = node.ms is None
            end_ns = max(trace.end_ns, node.start_ns) if node.ms is None else node.start_ns + int(node.ms * 1e6)
            metadata = {"route": node.route or None, "ms": round((end_ns - node.start_ns) / 1e6, 2)}
            attributes = {**common, _A.OBSERVATION_TYPE: "span", **_metadata(_A.OBSERVATION_METADATA, metadata)}
            ids.use(span_id=_span_id(trace.trace_id, f"node:{index}:{node.node}"))
            span = tracer.start_span(node.node, context=in_root, start_time=node.start_ns, attributes=attributes)
            if still_running and failed:
                _mark_failed(span, trace.status)
            node_spans.append((span, node.start_ns, end_ns, node.node))

        for index, generation in enumerate(trace.generations):
            parent = _enclosing(node_spans, generation)
            attributes = {
                **common,
                _A.OBSERVATION_TYPE: "generation",
                _A.OBSERVATION_MODEL: generation.model,
                _A.OBSERVATION_USAGE_DETAILS: _json(
                    {
                        "input": generation.input_tokens,
                        "output": generation.output_tokens,
                        "total": generation.total_tokens,
                    }
                ),
                **_metadata(_A.OBSERVATION_METADATA, {"node": generation.node, "operation": generation.operation}),
            }
            if generation.first_token_ns is not None:
                attributes[_A.OBSERVATION_COMPLETION_START_TIME] = _json(_isoformat(generation.first_token_ns))
            ids.use(span_id=_span_id(trace.trace_id, f"generation:{index}"))
            span = tracer.start_span(
                f"llm:{generation.node}",
                context=otel_trace.set_span_in_context(parent) if parent is not None else in_root,
                start_time=generation.start_ns,
                attributes=attributes,
            )
            if generation.error:
                _mark_failed(span, generation.error)
            span.end(end_time=max(generation.end_ns, generation.start_ns))

        for span, _start, end_ns, _node in node_spans:
            span.end(end_time=end_ns)
        root.end(end_time=max(trace.end_ns, trace.start_ns))

    def _trace_attributes(self, trace: FinishedTrace) -> dict[str, Any]:
        """Trace-level attributes, on every span as `propagate_attributes` would put them."""
        attributes: dict[str, Any] = {_A.TRACE_NAME: TRACE_NAME}
        if trace.conversation_id:
            attributes[_A.TRACE_SESSION_ID] = trace.conversation_id
        if trace.client_id:
            # The client id is a bearer token: Langfuse gets a one-way hash of it.
            attributes[_A.TRACE_USER_ID] = client_ref_for(trace.client_id)
        tags = tuple(tag for tag in (trace.backend, trace.intent, "rebuilt" if trace.rebuilt_from else "") if tag)
        if tags:
            attributes[_A.TRACE_TAGS] = tags
        trace_metadata = {
            "request_id": trace.request_id,
            "backend": trace.backend or None,
            "intent": trace.intent or None,
            "language": trace.language or None,
            "status": trace.status,
        }
        attributes.update(_metadata(_A.TRACE_METADATA, trace_metadata))
        if self._environment:
            attributes[_A.ENVIRONMENT] = self._environment
        if self._release:
            attributes[_A.RELEASE] = self._release
        return attributes

    def send_score(self, job: ScoreJob) -> None:
        if job.trace is not None:
            self.export(job.trace)
            self.rebuilt_traces += 1
            # Export the trace now, before the score is queued: a score for a trace Langfuse has not seen is lost.
            self._provider.force_flush(self._timeout_ms)
            self._unflushed_spans = 0
        score = job.score
        self._client.create_score(
            name=score.name,
            value=score.value,
            trace_id=score.trace_id,
            score_id=score.score_id,
            data_type=score.data_type,
            comment=score.comment,
            metadata=dict(score.metadata) if score.metadata else None,
        )
        self.scores_sent += 1

    def flush(self) -> None:
        """Spans exported and scores sent, everything handed to the SDK so far."""
        self._client.flush()
        self._unflushed_spans = 0

    def shutdown(self) -> None:
        self._client.shutdown()
        self._provider.shutdown()
        _forget_sdk_resources(self.public_key)


class LangfuseExporter:
    """A `LangfuseWriter` on a background thread, fed by a bounded queue (telemetry's `Exporter`): the project's
    `WriterThread`, whose full queue drops and counts rather than make a request wait."""

    def __init__(self, *, queue_size: int = 1000, **writer_options: Any) -> None:
        self.writer = LangfuseWriter(**writer_options)
        self.public_key = self.writer.public_key
        self.queue_size = queue_size
        # Through a lambda: `_handle` is looked up per item, so a test can slow it down.
        self._thread: WriterThread[Any] = WriterThread(
            lambda item: self._handle(item), name="telemetry-export", queue_size=queue_size
        )

    # --- request side (any thread; never blocks) -------------------------------------------------------------
    def submit_trace(self, trace: FinishedTrace) -> bool:
        return self._thread.submit(trace)

    def submit_score(self, score: ScoreRecord, *, trace: FinishedTrace | None) -> bool:
        return self._thread.submit(ScoreJob(score, trace))

    @property
    def dropped(self) -> int:
        return self._thread.dropped

    @property
    def errors(self) -> int:
        return self._thread.errors

    def stats(self) -> dict[str, int]:
        return {
            "pending": self._thread.pending,
            "queue_size": self.queue_size,
            "dropped": self._thread.dropped,
            "exported_traces": self.writer.exported_traces,
            "rebuilt_traces": self.writer.rebuilt_traces,
            "scores_sent": self.writer.scores_sent,
            "errors": self._thread.errors,
        }

    def _handle(self, item: Any) -> None:
        self.writer.handle(item)

    # --- lifecycle (blocking: call off the event loop) ---------------------------------------------------------
    def drain(self, timeout: float) -> bool:
        """Wait until everything queued so far has been handed to the SDK; False if `timeout` ran out."""
        return self._thread.drain(timeout)

    def flush(self, timeout: float = 10.0) -> bool:
        """Everything queued so far exported (spans) and sent (scores)."""
        drained = self.drain(timeout)
        self.writer.flush()
        return drained

    def shutdown(self, timeout: float = 10.0) -> None:
        if self._thread.closed:
            return
        self._thread.close(timeout)
        self.writer.shutdown()

    @property
    def alive(self) -> bool:
        return self._thread.alive


def _root_metadata(trace: FinishedTrace) -> dict[str, Any]:
    return {
        "request_id": trace.request_id,
        "status": trace.status,
        "latency_ms": trace.latency_ms,
        "answer_chars": trace.answer_chars,
        "usage": {"input": trace.usage[0], "output": trace.usage[1], "total": trace.usage[2]},
        "search_query": trace.search_query or None,
        "loops": trace.loops,
        "cached": trace.cached,
        "sources": list(trace.sources) or None,
        "nodes": [node.node for node in trace.nodes] or None,
        "rebuilt_from": trace.rebuilt_from or None,
    }


def _enclosing(node_spans: list[tuple[Any, int, int, str]], generation: GenerationRecord) -> Any:
    """The span of the node run that made an LLM call: the one running when it was reported, else (a record
    without that index) the last run of the node of the call's label that started before it."""
    if generation.span_index is not None and generation.span_index < len(node_spans):
        return node_spans[generation.span_index][0]
    found = None
    for span, span_start, _end, span_node in node_spans:
        if span_node == generation.node and span_start <= generation.start_ns:
            found = span
    return found


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _metadata(prefix: str, values: dict[str, Any]) -> dict[str, str]:
    """Metadata as the SDK writes it: one attribute per key, each value JSON-encoded (None values left out)."""
    return {f"{prefix}.{key}": _json(value) for key, value in values.items() if value is not None}


def _mark_failed(span: Any, message: str) -> None:
    span.set_attribute(_A.OBSERVATION_LEVEL, "ERROR")
    span.set_attribute(_A.OBSERVATION_STATUS_MESSAGE, message)
    span.set_status(Status(StatusCode.ERROR, message))


def _isoformat(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def _forget_sdk_resources(public_key: str) -> None:
    """The SDK keeps one resource manager per public key for the life of the process and hands the same one to
    every later `Langfuse(...)` with that key. Once shut down it silently drops everything, so a telemetry built
    again in this process (the runtime rebuilt after a reindex, tests) must not inherit it."""
    try:
        # Imported here: a private module of the SDK, which a release may move (the ImportError below).
        from langfuse._client.resource_manager import LangfuseResourceManager

        with LangfuseResourceManager._lock:
            LangfuseResourceManager._instances.pop(public_key, None)
    except (ImportError, AttributeError):  # a future SDK without the registry: nothing to forget
        pass
