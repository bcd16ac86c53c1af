"""The one object callers use for LLM permits: ``LLMConcurrencyManager``, one per process (``get_manager()``).

``async with get_manager().acquire("chat"):`` holds one permit of a backend for the block. Limits are meant to match
vLLM's ``--max-num-seqs`` so requests queue here, where they are visible and time-bounded, rather than inside the
inference server.

The manager holds a ``PermitSource`` (``concurrency.permits``), which counts the permits and orders the waiters:
this process's own semaphores (``concurrency.local_permits.LocalPermits``, the default) or the cluster's in Redis
(``concurrency.cluster.cluster_manager``). Whatever the source, the manager keeps the books once: the settings
(limits, order, waiting bounds), the bounds on waiting (``max_waiters``, the acquire timeout, and ``BusyError`` past
either), totals, wait times and retry advice for the stats, and the request's progress (``concurrency.context``):
a block that exits normally counts as a completed call, which is what priority mode orders by.

Threading model: like the rest of asyncio, a manager is used from one event loop at a time (its source binds to
the running loop). ``set_limit``/``configure`` must run on the loop's thread (or be scheduled with
``loop.call_soon_threadsafe``); ``stats`` may run off it.

Pure asyncio/stdlib: nothing here may import Django, chat or the RAG pipeline.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from .context import _current, live_request_contexts
from .errors import BusyError, BusyReason
from .local_permits import LocalPermits
from .permits import LOW_PRIORITY, Occupancy, PermitAsk, PermitSource
from .stats import BackendStats, ManagerStats, WaitWindow

__all__ = [
    "DEFAULT_LIMITS",
    "KNOWN_BACKENDS",
    "LOW_PRIORITY",
    "LLMConcurrencyManager",
    "LLMPermit",
    "get_manager",
    "reset_manager",
    "set_manager",
    "with_llm_semaphore",
]

T = TypeVar("T")

KNOWN_BACKENDS = ("default", "chat", "responses", "embedding")
# Placeholders for get_manager() when the caller passes no limits; real values come from settings,
# wired by the caller (this module must not read Django settings).
DEFAULT_LIMITS: Mapping[str, int] = {"default": 8, "chat": 8, "responses": 8, "embedding": 16}

# How long a computed retry_after estimate is reused: under overload every rejected call needs one,
# and sorting the wait window for each would make shedding load cost more than serving it.
_RETRY_AFTER_CACHE_S = 0.5
# retry_after from the queue: the latest calls' hold times (within the horizon), and the longest advice given.
_HOLD_SAMPLES = 50
_HOLD_HORIZON_S = 60.0
_RETRY_AFTER_MAX_S = 300.0


def _check_limit(backend: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"limit for LLM backend {backend!r} must be an integer >= 1, got {n!r}")
    return n


def _check_timeout(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        # Finite on purpose: an unbounded wait for an LLM slot turns overload into hung requests.
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _check_max_waiters(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"max_waiters must be an integer >= 0, got {n!r}")
    return n


class _Book:
    """One backend's books, whatever the source: totals, recent waits and hold times, this manager's waiters; and
    the source and clock its permits use. Made by the manager, shared with the permits it hands out."""

    __slots__ = (
        "acquired",
        "clock",
        "holds",
        "name",
        "rejected",
        "released",
        "retry_cache",
        "samples",
        "source",
        "timeout",
        "try_take",
        "waiting",
        "window",
    )

    def __init__(self, name: str, source: PermitSource[Any], clock: Callable[[], float], window: WaitWindow) -> None:
        self.name = name
        self.source = source
        self.try_take = source.try_take  # fast-path alias
        self.clock = clock
        self.acquired = 0
        self.released = 0
        self.timeout = 0
        self.rejected = 0
        # Callers of this manager queued for a permit: the bound max_waiters applies to.
        self.waiting = 0
        self.window = window
        self.samples = window.samples  # fast-path alias
        self.retry_cache: tuple[float, float] | None = None  # (computed_at, seconds)
        # (released_at, seconds held) of the latest calls: how long a permit is held, for retry_after.
        self.holds: deque[tuple[float, float]] = deque(maxlen=_HOLD_SAMPLES)

    def waited(self, now: float, waited: float) -> float:
        """Count a permit that came at ``now`` after ``waited`` seconds in the queue (and add them to the
        request's)."""
        self.acquired += 1
        self.samples.append((now, waited))
        ctx = _current.get()
        if ctx is not None:
            ctx.permit_wait_s += waited
        return waited

    def busy(self, reason: BusyReason, waited: float) -> BusyError:
        """The refusal of a caller, counted, with the source's occupancy and a retry advice."""
        if reason == "rejected":
            self.rejected += 1
        else:
            self.timeout += 1
        seen = self.source.occupancy(self.name)
        return BusyError(self.name, reason, self.retry_after(seen), waited, *seen)

    def retry_after(self, seen: Occupancy) -> float:
        """Estimate for BusyError.retry_after: the work queued ahead of a new caller, (waiters + 1) x the mean
        time a recent call held its permit / limit (the one more is the caller's own turn); p90 of recent waits
        when no call finished lately. Between 1 s and _RETRY_AFTER_MAX_S."""
        now = self.clock()
        cached = self.retry_cache
        if cached is not None and now - cached[0] < _RETRY_AFTER_CACHE_S:
            return cached[1]
        holds = [held for released, held in self.holds if now - released <= _HOLD_HORIZON_S]
        queued = (seen.waiting + 1) * (sum(holds) / len(holds)) / max(1, seen.limit) if holds else 0.0
        estimate = queued if holds else self.window.summary(now)["p90"]
        value = min(max(estimate, 1.0), _RETRY_AFTER_MAX_S)
        self.retry_cache = (now, value)
        return value


class LLMPermit:
    """Async context manager returned by ``LLMConcurrencyManager.acquire``; holds one permit in the block.

    ``waited_s`` is how long the permit took to obtain (0.0 when one was free).
    """

    __slots__ = ("_book", "_grant", "_held", "_low_priority", "_manager", "_since", "_timeout", "waited_s")

    def __init__(self, manager: LLMConcurrencyManager, book: _Book, timeout: float | None, low_priority: bool) -> None:
        self._manager = manager
        self._book = book
        self._timeout = timeout
        self._low_priority = low_priority
        self._grant: Any = None
        self._held = False
        self._since = 0.0
        self.waited_s = 0.0

    @property
    def backend(self) -> str:
        return self._book.name

    async def __aenter__(self) -> LLMPermit:
        if self._held:
            raise RuntimeError("this LLMPermit is already held; call acquire() again for another permit")
        book = self._book
        # Fast path: a free permit and nobody queued, as the source can tell at once.
        grant = book.try_take(book.name)
        if grant is not None:
            now = book.clock()
            book.acquired += 1
            book.samples.append((now, 0.0))
        else:
            # Queue in the source, within the manager's bounds. Awaited here rather than in a helper coroutine: a
            # coroutine more per queued acquire was a measurable share of its cost.
            started = book.clock()
            ask, wait, refusal = self._terms(started)
            if refusal is not None:  # no waiting: only a permit free at once
                grant = await book.source.take(book.name, ask, 0.0, may_queue=False)
                if grant is None:
                    raise book.busy(refusal, 0.0)
            else:
                book.waiting += 1
                try:
                    grant = await book.source.take(book.name, ask, wait, may_queue=True)
                finally:
                    book.waiting -= 1
                if grant is None:
                    raise book.busy("timeout", book.clock() - started)
            now = book.clock()
            self.waited_s = book.waited(now, now - started)
        self._grant = grant
        self._held = True
        self._since = now
        return self

    def _terms(self, started: float) -> tuple[PermitAsk, float, BusyReason | None]:
        """Who asks (the request's place in the queue), how long it may wait, and why it may not when it may not."""
        manager = self._manager
        ctx = _current.get()
        if self._low_priority:
            ask = PermitAsk(LOW_PRIORITY, started, None if ctx is None else ctx.request_id)
        elif ctx is None:
            ask = PermitAsk(-1, started, None)
        else:
            ask = PermitAsk(-(ctx.completed_calls + 1), ctx.arrival, ctx.request_id)
        wait = manager.acquire_timeout if self._timeout is None else self._timeout
        if self._book.waiting >= manager.max_waiters:
            return ask, wait, "rejected"
        return ask, wait, None if wait > 0 else "timeout"

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._held:
            # A second exit would release a permit some other caller holds.
            raise RuntimeError("this LLMPermit is not held")
        self._held = False
        if exc_type is None:
            # Only a call that finished counts towards the request's progress (and so its priority).
            ctx = _current.get()
            if ctx is not None:
                ctx.completed_calls += 1
        book = self._book
        book.source.give_back(book.name, self._grant)
        self._grant = None
        book.released += 1
        now = book.clock()
        book.holds.append((now, now - self._since))


class LLMConcurrencyManager:
    """Per-backend limits with FIFO or priority ordering, bounded waiting and live resizing, over a permit source.

    Priority mode: priority = -(completed LLM calls of the request + 1); lower goes first, so a request
    that has completed more calls (closer to finishing) is served first. Ties: older request first,
    then enqueue order. Starvation boost: once the oldest waiter has waited ``starvation_threshold``
    seconds it is boosted and served before any unboosted waiter; boosted waiters go oldest first.
    Low-priority calls (``acquire(..., low_priority=True)``) go after every other waiter, in both modes.

    ``source``: where permits come from (default: this process's own, ``LocalPermits`` on ``clock``); the manager
    configures it with ``limits`` and the order. A source given must run on the same ``clock``.
    """

    def __init__(
        self,
        limits: Mapping[str, int],
        *,
        priority_enabled: bool = False,
        starvation_threshold: float = 10.0,
        acquire_timeout: float = 30.0,
        max_waiters: int = 200,
        clock: Callable[[], float] = time.monotonic,
        wait_window_size: int = 1000,
        wait_window_seconds: float = 60.0,
        source: PermitSource[Any] | None = None,
    ) -> None:
        if not limits:
            raise ValueError("LLMConcurrencyManager needs at least one backend limit")
        self._clock = clock
        self._window_size = wait_window_size
        self._window_seconds = wait_window_seconds
        WaitWindow(wait_window_size, wait_window_seconds)  # validate once, before any state exists
        self._priority = bool(priority_enabled)
        self._starvation_threshold = _check_timeout("starvation_threshold", starvation_threshold)
        self._acquire_timeout = _check_timeout("acquire_timeout", acquire_timeout)
        self._max_waiters = _check_max_waiters(max_waiters)
        checked = {name: _check_limit(name, n) for name, n in limits.items()}
        self._source: PermitSource[Any] = LocalPermits(clock=clock) if source is None else source
        self._source.set_order(priority=self._priority, starvation_threshold=self._starvation_threshold)
        self._limits: dict[str, int] = {}
        self._books: dict[str, _Book] = {}
        for name, n in checked.items():
            self.set_limit(name, n)
        # Auxiliary calls (planner, summary...) that got no permit in time and were skipped, by kind.
        self._skipped: dict[str, int] = {}

    # ------------------------------------------------------------------ properties

    @property
    def source(self) -> PermitSource[Any]:
        return self._source

    @property
    def mode(self) -> str:
        return "priority" if self._priority else "fifo"

    @property
    def priority_enabled(self) -> bool:
        return self._priority

    @property
    def starvation_threshold(self) -> float:
        return self._starvation_threshold

    @property
    def acquire_timeout(self) -> float:
        return self._acquire_timeout

    @property
    def max_waiters(self) -> int:
        return self._max_waiters

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self._limits)

    def limit(self, backend: str) -> int:
        self._book(backend)
        return self._limits[backend]

    # ------------------------------------------------------------------ acquiring

    def acquire(self, backend: str, timeout: float | None = None, *, low_priority: bool = False) -> LLMPermit:
        """``async with manager.acquire("chat"):`` holds one permit of ``backend`` for the block.

        ``timeout``: seconds to wait in the queue (default ``acquire_timeout``; 0 = only take a free
        permit). ``low_priority``: served only when no other waiter is queued (``LOW_PRIORITY``), never
        boosted, so it never takes a permit ahead of a request's call. Raises ValueError for an unknown
        backend (a typo must not silently share another backend's limit), BusyError("rejected") when
        ``max_waiters`` are already queued, and BusyError("timeout") when no permit came in time.
        """
        book = self._books.get(backend)
        if book is None:
            book = self._book(backend)  # raises the ValueError
        if timeout is not None:
            _check_timeout("timeout", timeout)
        return LLMPermit(self, book, timeout, low_priority)

    def auxiliary_skipped(self, kind: str) -> None:
        """Count an auxiliary call of ``kind`` (planner, summary...) skipped because no permit came in time."""
        self._skipped[kind] = self._skipped.get(kind, 0) + 1

    async def run(
        self,
        backend: str,
        coro_fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        # Named `timeout` for API symmetry with acquire(); it bounds the permit wait, not the call, so
        # asyncio.timeout() (what ASYNC109 suggests) would be the wrong tool.
        timeout: float | None = None,  # noqa: ASYNC109
        **kwargs: Any,
    ) -> T:
        """Await ``coro_fn(*args, **kwargs)`` while holding a permit of ``backend``.

        ``timeout`` is the acquire timeout, not passed on; give the callee its own timeout through
        functools.partial or a lambda.
        """
        async with self.acquire(backend, timeout):
            return await coro_fn(*args, **kwargs)

    # ------------------------------------------------------------------ configuration

    def _book(self, backend: str) -> _Book:
        try:
            return self._books[backend]
        except KeyError:
            known = ", ".join(sorted(self._books))
            raise ValueError(f"unknown LLM backend {backend!r}; configured backends: {known}") from None

    def set_limit(self, backend: str, n: int) -> None:
        """Change a backend's limit at run time (adds the backend if new).

        Up: queued waiters are admitted at once. Down: in-flight calls finish normally and nobody new
        is admitted until in_progress drops below the new limit. No permit is created or lost.
        """
        n = _check_limit(backend, n)
        if backend not in self._books:
            self._books[backend] = _Book(
                backend, self._source, self._clock, WaitWindow(self._window_size, self._window_seconds)
            )
        self._limits[backend] = n
        self._source.set_limit(backend, n)

    def configure(
        self,
        *,
        priority_enabled: bool | None = None,
        starvation_threshold: float | None = None,
        acquire_timeout: float | None = None,
        max_waiters: int | None = None,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        """Apply a settings object at once; None leaves a value unchanged.

        Everything is validated before anything changes. Backends missing from ``limits`` keep their
        limit (removing one with calls in flight could not be done safely). ``acquire_timeout`` applies
        to new waiters; ``max_waiters`` lowered below the current queue only rejects newcomers.
        """
        if starvation_threshold is not None:
            starvation_threshold = _check_timeout("starvation_threshold", starvation_threshold)
        if acquire_timeout is not None:
            acquire_timeout = _check_timeout("acquire_timeout", acquire_timeout)
        if max_waiters is not None:
            max_waiters = _check_max_waiters(max_waiters)
        new_limits = {name: _check_limit(name, n) for name, n in (limits or {}).items()}

        if acquire_timeout is not None:
            self._acquire_timeout = acquire_timeout
        if max_waiters is not None:
            self._max_waiters = max_waiters
        if starvation_threshold is not None or priority_enabled is not None:
            if starvation_threshold is not None:
                self._starvation_threshold = starvation_threshold
            if priority_enabled is not None:
                self._priority = bool(priority_enabled)
            self._source.set_order(priority=self._priority, starvation_threshold=self._starvation_threshold)
        for name, n in new_limits.items():
            self.set_limit(name, n)

    # ------------------------------------------------------------------ stats

    def stats(self, *, queue_head: int = 5) -> ManagerStats:
        """A snapshot for dashboards/health checks; read-only, so it may also be called off the loop."""
        now = self._clock()
        result: ManagerStats = {
            "mode": self.mode,
            "starvation_threshold": self._starvation_threshold,
            "acquire_timeout": self._acquire_timeout,
            "max_waiters": self._max_waiters,
            "live_requests": len(live_request_contexts()),
            "auxiliary_skipped": dict(self._skipped),
            "backends": {
                name: self._backend_stats(name, book, now, queue_head) for name, book in list(self._books.items())
            },
        }
        cluster = self._source.cluster_stats()
        if cluster is not None:
            result["cluster"] = cluster
        return result

    def _backend_stats(self, name: str, book: _Book, now: float, head_size: int) -> BackendStats:
        """This worker's permits and waiters, and the books; ``available`` is what is free wherever the limit
        applies (the whole cluster for a shared source, as last seen)."""
        here = self._source.here(name)
        seen = self._source.occupancy(name)
        limit = self._limits[name]
        waits = book.window.summary(now)
        return {
            "limit": limit,
            "available": max(0, limit - max(seen.in_progress, here.in_progress)),
            "in_progress": here.in_progress,
            "waiting": here.waiting,
            "total_acquired": book.acquired,
            "total_released": book.released,
            "total_timeout": book.timeout,
            "total_rejected": book.rejected,
            "wait_samples": waits["samples"],
            "wait_ms_p50": round(waits["p50"] * 1000.0, 3),
            "wait_ms_p95": round(waits["p95"] * 1000.0, 3),
            "wait_ms_p99": round(waits["p99"] * 1000.0, 3),
            "max_wait_ms": round(waits["max"] * 1000.0, 3),
            "queue_head": self._source.queue_head(name, head_size),
        }

    async def aclose(self) -> None:
        """Stop the source's background work and close its connections (tests, shutdown)."""
        await self._source.aclose()


# ---------------------------------------------------------------------- process singleton

_manager: LLMConcurrencyManager | None = None


def get_manager(
    limits: Mapping[str, int] | None = None,
    *,
    priority_enabled: bool | None = None,
    starvation_threshold: float | None = None,
    acquire_timeout: float | None = None,
    max_waiters: int | None = None,
) -> LLMConcurrencyManager:
    """The process manager. Created on first call from the arguments (DEFAULT_LIMITS and the
    constructor defaults for what is omitted); on later calls, any given arguments are applied with
    ``configure`` so the caller's settings always win. Callers pass settings in; nothing is read here.
    """
    global _manager
    options: dict[str, Any] = {
        "priority_enabled": priority_enabled,
        "starvation_threshold": starvation_threshold,
        "acquire_timeout": acquire_timeout,
        "max_waiters": max_waiters,
    }
    given = {k: v for k, v in options.items() if v is not None}
    if _manager is None:
        _manager = LLMConcurrencyManager(DEFAULT_LIMITS if limits is None else limits, **given)
    elif given or limits is not None:
        _manager.configure(limits=limits, **given)
    return _manager


def set_manager(manager: LLMConcurrencyManager | None) -> None:
    """Replace the process manager (tests, or a caller that builds its own)."""
    global _manager
    _manager = manager


def reset_manager() -> None:
    """Forget the process manager; the next get_manager() builds a fresh one."""
    set_manager(None)


async def with_llm_semaphore(
    backend: str,
    coro_fn: Callable[..., Awaitable[T]],
    /,
    *args: Any,
    timeout: float | None = None,  # noqa: ASYNC109 - bounds the permit wait, not the call
    **kwargs: Any,
) -> T:
    """``await with_llm_semaphore("chat", fn, *args, **kwargs)``: run ``fn`` under the process manager.

    ``timeout`` is the acquire timeout and is not forwarded to ``fn`` (see LLMConcurrencyManager.run).
    """
    return await get_manager().run(backend, coro_fn, *args, timeout=timeout, **kwargs)
