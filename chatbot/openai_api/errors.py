"""Errors in OpenAI's shape: `{"error": {"message", "type", "code", "param"}}` with the HTTP status OpenAI uses."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# pipeline error code -> (HTTP status, OpenAI error type)
_BY_CODE: dict[str, tuple[int, str]] = {
    "bad_request": (400, "invalid_request_error"),
    "blocked": (400, "invalid_request_error"),
    "busy": (429, "rate_limit_error"),
    "rate_limit_exceeded": (429, "rate_limit_error"),
    "missing_api_key": (401, "invalid_request_error"),
    "invalid_api_key": (401, "invalid_request_error"),
    "insufficient_scope": (403, "permission_error"),
    "model_not_found": (404, "invalid_request_error"),
    "timeout": (504, "timeout_error"),
    "upstream_error": (502, "api_error"),
    "unavailable": (503, "service_unavailable_error"),
    "cancelled": (499, "api_error"),
    "internal": (500, "api_error"),
}


@dataclass(frozen=True, slots=True)
class ApiError(Exception):
    """An error response: status, OpenAI type, our code, a message naming what was wrong, and for 429/503 the
    seconds a client should wait (sent as `Retry-After`)."""

    status: int
    type: str
    code: str
    message: str
    param: str | None = None
    retry_after: int | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after is None:
            return []
        return [(b"retry-after", str(self.retry_after).encode("ascii"))]


def api_error(code: str, message: str, *, param: str | None = None, retry_after: float | None = None) -> ApiError:
    """The error for one of our codes (the pipeline's terminal codes, and the API's own)."""
    status, kind = _BY_CODE.get(code, (500, "api_error"))
    seconds = None
    if retry_after is not None or status in (429, 503):
        seconds = _whole_seconds(retry_after)
    return ApiError(status, kind, code, message, param, seconds)


def error_from_event(event: dict[str, Any]) -> ApiError:
    """The error for a terminal `error` event of the pipeline."""
    return api_error(
        str(event.get("code") or "internal"),
        str(event.get("message") or "the answer failed"),
        retry_after=event.get("retry_after"),
    )


def _whole_seconds(value: Any, default: float = 1.0) -> int:
    # At least 1: `Retry-After: 0` invites a client to retry in a busy loop.
    try:
        seconds = float(value) if value is not None else default
    except (TypeError, ValueError):
        seconds = default
    if not math.isfinite(seconds):
        seconds = default
    return max(1, math.ceil(seconds))
