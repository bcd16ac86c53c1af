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
