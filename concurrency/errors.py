"""Errors raised by the LLM concurrency manager."""

from __future__ import annotations

import math
from typing import Literal

__all__ = ["BusyError", "BusyReason"]

BusyReason = Literal["timeout", "rejected"]


class BusyError(Exception):
    """No LLM slot was obtained; the caller should tell the user to retry after ``retry_after`` seconds.

    ``reason`` is ``"timeout"`` when the acquire timeout passed while queued, ``"rejected"`` when the wait
    queue was already full (refused at once, so an overloaded process sheds load instead of queueing
    without bound).
    """

    def __init__(
        self,
        backend: str,
        reason: BusyReason,
        retry_after: float,
        waited: float = 0.0,
        in_progress: int = 0,
        waiting: int = 0,
        limit: int = 0,
    ) -> None:
        if reason not in ("timeout", "rejected"):
            raise ValueError(f"BusyError reason must be 'timeout' or 'rejected', not {reason!r}")
        self.backend = backend
        self.reason: BusyReason = reason
        # Whole seconds, at least 1: it ends up in a Retry-After header / user message, and telling a
        # client to retry in 0 s just turns overload into a busy loop.
        self.retry_after = float(max(1, math.ceil(retry_after))) if math.isfinite(retry_after) else 1.0
        self.waited = waited
        self.in_progress = in_progress
        self.waiting = waiting
        self.limit = limit
        super().__init__(self._message())

    def _message(self) -> str:
        if self.reason == "timeout":
            what = f"no free slot after waiting {self.waited:.1f} s"
        else:
            what = f"the wait queue is full ({self.waiting} waiting)"
        return (
            f"LLM backend {self.backend!r} is busy: {what}; {self.in_progress}/{self.limit} slots in use; "
            f"retry after {self.retry_after:.0f} s"
        )

    def __reduce__(self) -> tuple[type[BusyError], tuple[str, str, float, float, int, int, int]]:
        # Exception's default pickling replays self.args (the message) into __init__, which would fail.
        return (
            type(self),
            (self.backend, self.reason, self.retry_after, self.waited, self.in_progress, self.waiting, self.limit),
        )
