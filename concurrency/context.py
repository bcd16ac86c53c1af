"""Per-request context that travels with the asyncio task through a ContextVar.

The concurrency manager reads it to prioritise waiters (a request that has already completed more LLM
calls is closer to finishing) and writes to it when a call completes. Pure asyncio/stdlib on purpose:
the dependency direction is chatbot -> rag -> concurrency, never the other way.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

__all__ = [
    "RequestContext",
    "current_request_context",
    "live_request_contexts",
    "request_context_register",
    "request_context_unregister",
    "request_scope",
]


# weakref_slot: the live registry is a WeakSet, so a context whose unregister was forgotten disappears
# once nothing (task context, caller) references it instead of leaking forever.
# eq=False: identity semantics, two requests may reuse an id and must still be distinct registry entries.
@dataclass(slots=True, eq=False, weakref_slot=True)
class RequestContext:
    """State of one user request as seen by the LLM concurrency manager."""

    request_id: str
    # time.monotonic() when the request arrived; breaks priority ties (older request first).
    arrival: float = field(default_factory=time.monotonic)
    # LLM calls of this request whose permit block exited normally.
    completed_calls: int = 0
    # Total seconds this request's calls spent queued for a permit (for telemetry).
    permit_wait_s: float = 0.0
    _token: Token[RequestContext | None] | None = field(default=None, repr=False)

    def age(self, now: float | None = None) -> float:
        """Seconds since the request arrived."""
        return (time.monotonic() if now is None else now) - self.arrival


_current: ContextVar[RequestContext | None] = ContextVar("llm_request_context", default=None)
_live: weakref.WeakSet[RequestContext] = weakref.WeakSet()


def current_request_context() -> RequestContext | None:
    """The RequestContext of the running task, or None outside a registered request."""
    return _current.get()


def request_context_register(request_id: str, *, arrival: float | None = None) -> RequestContext:
    """Create a RequestContext, make it current in this task's context and add it to the live registry.

    Tasks created afterwards inherit it (asyncio copies the context), so sub-tasks of one request share
    the same object and their completed calls add up.
    """
    ctx = RequestContext(request_id, time.monotonic() if arrival is None else arrival)
    ctx._token = _current.set(ctx)
    _live.add(ctx)
    return ctx


def request_context_unregister(ctx: RequestContext | None = None) -> None:
    """Remove ``ctx`` (default: the current one) from the registry and restore the previous ContextVar value.

    Safe to call twice and from another context than the one that registered: then the token cannot be
    reset, and the variable is only cleared if it still points at ``ctx``.
    """
    if ctx is None:
        ctx = _current.get()
        if ctx is None:
            return
    _live.discard(ctx)
    token, ctx._token = ctx._token, None
    if _current.get() is not ctx:
        return
    if token is not None:
        try:
            _current.reset(token)
            return
        except (ValueError, RuntimeError):
            # ValueError: token made in another Context; RuntimeError: token already used.
            pass
    _current.set(None)


@contextmanager
def request_scope(request_id: str, *, arrival: float | None = None) -> Iterator[RequestContext]:
    """``with request_scope(rid) as ctx:`` registers a request for the block and always unregisters it."""
    ctx = request_context_register(request_id, arrival=arrival)
    try:
        yield ctx
    finally:
        request_context_unregister(ctx)


def live_request_contexts() -> list[RequestContext]:
    """Registered requests, oldest first (a snapshot; the registry is weak)."""
    for _ in range(3):
        try:
            snapshot = list(_live)
            break
        except RuntimeError:
            # "Set changed size during iteration": a stats reader on another thread raced a register.
            continue
    else:
        snapshot = []
    return sorted(snapshot, key=lambda c: c.arrival)
