"""Exceptions that end a pipeline run with a specific terminal error code."""

from __future__ import annotations


class PipelineAbort(Exception):
    """Raised anywhere below a run to end it with `code` (see rag.state.ERROR_CODES)."""

    code = "internal"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class UpstreamError(PipelineAbort):
    code = "upstream_error"


class UpstreamTimeout(PipelineAbort):
    code = "timeout"


class Busy(PipelineAbort):
    code = "busy"


class SlotUnavailable(Busy):
    """An LLM call that did not start: no requests-per-minute spot or concurrency slot came within its wait bound.

    Nothing was sent upstream. `reason`: "slot_timeout" (queued, no slot in time), "queue_full" (refused at once) or
    "rate_limit" (the requests-per-minute window is full for longer than the bound).
    """

    def __init__(self, message: str, *, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.reason = reason
