"""`Telemetry`: what the pipeline, the LLM backend and the feedback endpoint call.

Disabled (no Langfuse keys) it holds only the sampler, which still counts (staff see what the rate would
trace): no SDK import, no thread, no network, and `begin` returns None so the engine skips its observer.

Enabled, a request goes: `begin(state)` in the run's task (sampling decided once, trace id set, the record
becomes the engine's observer and the LLM backend's sink) -> nodes run -> `finish(state)` freezes the record and
either hands it to the exporter's bounded queue (sampled) or keeps a compact summary in a bounded in-memory
store (unsampled, or dropped with the queue full). Either way `state.trace_exported` says which, and the chat
stores it with the answer: when feedback comes (later, maybe in another worker, maybe after the sample rate
changed) that flag, not a new sampling decision, says whether the trace must be sent before the score. Nothing
on the request path waits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from rag.telemetry.record import (
    FinishedTrace,
    ScoreRecord,
    TraceRecord,
    current_trace,
    finished_trace_from_state,
    trace_id_for,
)
from rag.telemetry.sampler import TelemetrySampler

if TYPE_CHECKING:
    from rag.state import PipelineState

logger = logging.getLogger(__name__)


class Exporter(Protocol):
    """Where finished requests and scores go: `LangfuseProcessExporter` (rag.telemetry.process_export) or
    `LangfuseExporter` (rag.telemetry.langfuse_export). `submit_*` never block: False means dropped."""

    def submit_trace(self, trace: FinishedTrace) -> bool: ...

    def submit_score(self, score: ScoreRecord, *, trace: FinishedTrace | None) -> bool: ...

    def stats(self) -> dict[str, int]: ...

    def flush(self, timeout: float = ...) -> bool: ...

    def shutdown(self, timeout: float = ...) -> None: ...


class SummaryStore:
    """Compact summaries of requests whose trace was not exported, newest kept, at most `limit` of them.

    Written on the event loop, read by the feedback endpoint's thread: a lock held for a dict operation.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[str, FinishedTrace] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, summary: FinishedTrace) -> None:
        if self.limit <= 0:
            return
        with self._lock:
            self._items[summary.request_id] = summary
            self._items.move_to_end(summary.request_id)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)

    def get(self, request_id: str) -> FinishedTrace | None:
        with self._lock:
            return self._items.get(request_id)

    def __len__(self) -> int:
        return len(self._items)


class Telemetry:
    def __init__(
        self,
        *,
        sample_rate: float = 1.0,
        exporter: Exporter | None = None,
        summary_limit: int = 10_000,
    ) -> None:
        self.sampler = TelemetrySampler(sample_rate)
        self.exporter = exporter
        self.summaries = SummaryStore(summary_limit)

    @property
    def enabled(self) -> bool:
        return self.exporter is not None

    # --- the request path (event loop) -----------------------------------------------------------------------
    def begin(self, state: PipelineState) -> TraceRecord | None:
        """Start recording a request. Call it inside the run's own task (the record goes into a ContextVar that
        must not outlive the run). Returns the engine's observer, or None when telemetry is off."""
        sampled = self.sampler.check(state.request_id)
        if self.exporter is None:
            return None
        record = TraceRecord(state.request_id, trace_id_for(state.request_id), sampled)
        state.trace_id = record.trace_id
        current_trace.set(record)
        return record

    def finish(self, state: PipelineState) -> None:
        """Hand the request's record to the exporter (sampled) or keep its summary (unsampled). The run calls it
        once when it ends, whatever the path; a second call does nothing."""
        record = current_trace.get()
        if record is None or record.finished or record.request_id != state.request_id or self.exporter is None:
            return
        if state.error is not None:
            status, message = state.error.code, state.error.message
        elif _being_cancelled():
            status, message = "cancelled", "the request was cancelled"
        else:
            status, message = "ok", ""
        trace = finished_trace_from_state(record, state, status=status, message=message)
        state.trace_exported = record.sampled and self.exporter.submit_trace(trace)
        if not state.trace_exported:
            # Sampled out, or dropped with the queue full: keep what feedback would need to send it later.
            self.summaries.put(trace.compact())

    # --- feedback (any thread; enqueues only) -----------------------------------------------------------------
    def send_score(self, score: ScoreRecord, *, trace_exported: bool, fallback: FinishedTrace | None = None) -> bool:
        """Queue a score for a request's trace. `trace_exported` is what the request recorded when it finished
        (`state.trace_exported`, stored with its answer): when False, the trace is sent first (Langfuse drops a
        score whose trace it does not know), from this worker's summary of the request when it still has one,
        else from `fallback` (rebuilt from the stored messages: answered by another worker, or before a restart).
        """
        if self.exporter is None:
            return False
        trace = None
        if not trace_exported:
            trace = self.summaries.get(score.request_id) or fallback
            if trace is None:
                logger.warning("score for %s: its trace was never exported and no summary is left", score.request_id)
            elif not trace.rebuilt_from:
                trace = replace(trace, rebuilt_from="memory")
        return self.exporter.submit_score(score, trace=trace)

    # --- operations -------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": self.enabled, "sampler": self.sampler.stats().as_dict()}
        exporter = self.exporter
        if exporter is not None:
            out["export"] = exporter.stats()
            out["unsampled_summaries"] = len(self.summaries)
        return out

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything queued so far has been exported. Call it off the event loop."""
        return self.exporter.flush(timeout) if self.exporter is not None else True

    def shutdown(self, timeout: float = 10.0) -> None:
        """Export what is queued, then stop the exporter thread and the SDK. Call it off the event loop."""
        if self.exporter is not None:
            self.exporter.shutdown(timeout)


def _being_cancelled() -> bool:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        return False
    return task is not None and task.cancelling() > 0
