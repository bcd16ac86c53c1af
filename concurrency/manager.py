"""Process-wide limiter for concurrent LLM calls, one fair semaphore per backend.

Why not ``asyncio.Semaphore``: we need FIFO or priority ordering, direct handoff (a released permit goes
to the next waiter, never to a task that arrives later and "barges" in), bounded queues with load
shedding, live resizing and stats. Limits are meant to match vLLM's ``--max-num-seqs`` so requests queue
here, where they are visible and time-bounded, rather than inside the inference server.

Threading model: like the rest of asyncio, a manager is used from one event loop at a time. It binds to
the running loop on first use and refuses another running loop while it has permits out or waiters
queued (futures of one loop cannot be resolved from another). ``set_limit``/``configure`` must run on
the loop's thread (or be scheduled with ``loop.call_soon_threadsafe``).

Pure asyncio/stdlib: nothing here may import Django, chat or the RAG pipeline.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from .context import RequestContext, _current, live_request_contexts
from .errors import BusyError
from .stats import BackendStats, ManagerStats, QueueHeadEntry, WaitWindow

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

logger = logging.getLogger(__name__)

T = TypeVar("T")
_E = TypeVar("_E", bound=tuple[Any, ...])  # a heap entry whose last item is its waiter

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
# The priority of a low-priority waiter (work done after an answer, such as its conversation summary): above any
# request's priority (-(completed calls + 1) <= -1), and served only when no other waiter is queued, in both modes.
LOW_PRIORITY = 1
# Lazy deletion leaves dead waiters in the deque/heaps; rebuild once they outnumber live ones.
_COMPACT_SLACK = 64
# asyncio runs a timer up to one clock tick early (see BaseEventLoop._run_once); treat such a deadline
# as reached, or the deadline timer would re-arm for the same instant.
_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution


class _State(enum.Enum):
    WAITING = 1
    GRANTED = 2
    CANCELLED = 3
    TIMED_OUT = 4


_WAITING = _State.WAITING
_GRANTED = _State.GRANTED
_CANCELLED = _State.CANCELLED
_TIMED_OUT = _State.TIMED_OUT


class _Waiter:
    """One queued acquire. Lives in the backend's arrival deque and, in priority mode, also in its heap."""

    __slots__ = ("enqueued", "fut", "key", "priority", "request_id", "state")

    def __init__(
        self,
        fut: asyncio.Future[bool],
        priority: int,
        arrival: float,
        seq: int,
        enqueued: float,
        request_id: str | None,
    ) -> None:
        self.fut = fut
        self.priority = priority
        # Heap key: priority, then request arrival (older request first), then enqueue order. seq is
        # unique, so tuples never fall through to comparing the waiter itself.
        self.key = (priority, arrival, seq)
        self.enqueued = enqueued
        self.request_id = request_id
        self.state = _WAITING


class _Backend:
    __slots__ = (
        "deadlines",
        "heap",
        "holds",
        "in_progress",
        "limit",
        "low",
        "name",
        "queue",
        "retry_cache",
        "samples",
        "timer",
        "timer_when",
        "total_acquired",
        "total_rejected",
        "total_released",
        "total_timeout",
        "waiting",
        "window",
    )

    def __init__(self, name: str, limit: int, window: WaitWindow) -> None:
        self.name = name
        self.limit = limit
        # Permits currently out, including ones handed to a waiter whose task has not resumed yet.
        self.in_progress = 0
        # Live waiters (state WAITING). The deque/heap may also hold dead entries (lazy deletion).
        self.waiting = 0
        # All waiters in arrival order: the canonical queue in both modes, so switching mode never
        # loses or duplicates anyone.
        self.queue: deque[_Waiter] = deque()
        # Priority mode only: (key, waiter) min-heap over the same waiters.
        self.heap: list[tuple[tuple[int, float, int], _Waiter]] = []
        # Low-priority waiters, in arrival order: in neither of the above, served once those are empty.
        self.low: deque[_Waiter] = deque()
        # (loop deadline, seq, waiter) min-heap plus ONE loop timer per backend, armed for the earliest
        # deadline. A timer per waiter (call_later + cancel) made a contended acquire ~2x slower: the
        # loop's timer heap compares TimerHandles in Python and fills up with cancelled handles.
        self.deadlines: list[tuple[float, int, _Waiter]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.timer_when = 0.0
        self.total_acquired = 0
        self.total_released = 0
        self.total_timeout = 0
        self.total_rejected = 0
        self.window = window
        self.samples = window.samples  # fast-path alias
        self.retry_cache: tuple[float, float] | None = None  # (computed_at, seconds)
        # (released_at, seconds held) of the latest calls: how long a permit is held, for retry_after.
        self.holds: deque[tuple[float, float]] = deque(maxlen=_HOLD_SAMPLES)

    def drop_queued(self) -> None:
        """Empty the arrival deques and both heaps (the caller has accounted for ``waiting``)."""
        if self.queue:
            self.queue.clear()
        if self.low:
            self.low.clear()
        if self.heap:
            self.heap.clear()
        if self.deadlines:
            self.deadlines.clear()


def _still_waiting(b: _Backend, w: _Waiter) -> bool:
    """Whether ``w`` is still owed a permit: the one test every pop applies to a queued entry.

    A waiter whose task was cancelled but has not run its handler yet is retired here, so it is not granted a
    permit nobody would use; the handler then sees CANCELLED and does nothing.
    """
    if w.state is not _WAITING:
        return False
    if w.fut.done():
        w.state = _CANCELLED
        b.waiting -= 1
        return False
    return True


def _first_waiting(b: _Backend, q: deque[_Waiter]) -> _Waiter | None:
    """The oldest live waiter of an arrival deque, left at its head; the dead entries before it are dropped."""
    while q:
        head = q[0]
        if _still_waiting(b, head):
            return head
        q.popleft()
    return None


def _waiting_now(q: deque[_Waiter]) -> list[_Waiter]:
    """The live waiters of an arrival deque, in order, without changing anything (stats may run off the loop).

    list() copies the deque in one C call, so a call from another thread (a sync view) cannot hit "deque
    mutated during iteration".
    """
    return [w for w in list(q) if w.state is _WAITING and not w.fut.done()]


def _without_dead(q: deque[_Waiter]) -> deque[_Waiter]:
    return deque(w for w in q if w.state is _WAITING)


def _heap_without_dead(heap: list[_E]) -> list[_E]:
    """A heap of (..., waiter) entries rebuilt from its live ones (the waiter is each entry's last item)."""
    live = [e for e in heap if e[-1].state is _WAITING]
    heapq.heapify(live)
    return live


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


class LLMPermit:
    """Async context manager returned by ``LLMConcurrencyManager.acquire``; holds one permit in the block.

    ``waited_s`` is how long the permit took to obtain (0.0 when one was free).
    """

    __slots__ = ("_backend", "_held", "_low_priority", "_manager", "_since", "_timeout", "waited_s")

    def __init__(
        self, manager: LLMConcurrencyManager, backend: _Backend, timeout: float | None, low_priority: bool = False
    ) -> None:
        self._manager = manager
        self._backend = backend
        self._timeout = timeout
        self._low_priority = low_priority
        self._held = False
        self._since = 0.0
        self.waited_s = 0.0

    @property
    def backend(self) -> str:
        return self._backend.name

    async def __aenter__(self) -> LLMPermit:
        if self._held:
            raise RuntimeError("this LLMPermit is already held; call acquire() again for another permit")
        m = self._manager
        b = self._backend
        if asyncio.get_running_loop() is not m._loop:
            m._bind_loop()
        # Fast path, no allocation beyond the window sample: a free permit and nobody queued. Checking
        # `waiting` keeps newcomers from overtaking queued waiters.
        if not b.waiting and b.in_progress < b.limit:
            b.in_progress += 1
            b.total_acquired += 1
            b.samples.append((m._clock(), 0.0))
        else:
            self.waited_s = await m._acquire_slow(b, self._timeout, self._low_priority)
        self._held = True
        self._since = m._clock()
        return self

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
        # _release inlined: this runs once per LLM call and a method call is a measurable share of it.
        b = self._backend
        if b.in_progress <= 0:
            raise RuntimeError(f"LLM backend {b.name!r}: release without a matching acquire")
        b.in_progress -= 1
        b.total_released += 1
        now = self._manager._clock()
        b.holds.append((now, now - self._since))
        if b.waiting:
            self._manager._wake(b)


class LLMConcurrencyManager:
    """Per-backend fair semaphores with FIFO or priority ordering, bounded waiting and live resizing.

    Priority mode: priority = -(completed LLM calls of the request + 1); lower goes first, so a request
    that has completed more calls (closer to finishing) is served first. Ties: older request first,
    then enqueue order. Starvation boost: once the oldest waiter has waited ``starvation_threshold``
    seconds it is boosted and served before any unboosted waiter; boosted waiters go oldest first.
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
        self._backends: dict[str, _Backend] = {
            name: self._new_backend(name, _check_limit(name, n)) for name, n in limits.items()
        }
        self._seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        # Auxiliary calls (planner, summary...) that got no permit in time and were skipped, by kind.
        self._skipped: dict[str, int] = {}

    # ------------------------------------------------------------------ properties

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
        return tuple(self._backends)

    def limit(self, backend: str) -> int:
        return self._get_backend(backend).limit

    # ------------------------------------------------------------------ acquiring

    def acquire(self, backend: str, timeout: float | None = None, *, low_priority: bool = False) -> LLMPermit:
        """``async with manager.acquire("chat"):`` holds one permit of ``backend`` for the block.

        ``timeout``: seconds to wait in the queue (default ``acquire_timeout``; 0 = only take a free
        permit). ``low_priority``: served only when no other waiter is queued (``LOW_PRIORITY``), never
        boosted, so it never takes a permit ahead of a request's call. Raises ValueError for an unknown
        backend (a typo must not silently share another backend's limit), BusyError("rejected") when
        ``max_waiters`` are already queued, and BusyError("timeout") when no permit came in time.
        """
        b = self._backends.get(backend)
        if b is None:
            b = self._get_backend(backend)  # raises the ValueError
        if timeout is not None:
            _check_timeout("timeout", timeout)
        return LLMPermit(self, b, timeout, low_priority)

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

    async def _acquire_slow(self, b: _Backend, max_wait: float | None, low_priority: bool = False) -> float:
        """Queue for a permit; returns the seconds waited. The permit is counted in in_progress on return."""
        if b.waiting >= self._max_waiters:
            b.total_rejected += 1
            raise BusyError(b.name, "rejected", self._retry_after(b), 0.0, b.in_progress, b.waiting, b.limit)
        wait_limit = self._acquire_timeout if max_wait is None else max_wait
        if wait_limit <= 0:
            b.total_timeout += 1
            raise BusyError(b.name, "timeout", self._retry_after(b), 0.0, b.in_progress, b.waiting, b.limit)

        loop = asyncio.get_running_loop()
        now = self._clock()
        ctx: RequestContext | None = _current.get()
        if ctx is None:
            priority, arrival, request_id = -1, now, None
        else:
            priority, arrival, request_id = -(ctx.completed_calls + 1), ctx.arrival, ctx.request_id
        self._seq += 1
        if low_priority:
            w = _Waiter(loop.create_future(), LOW_PRIORITY, now, self._seq, now, request_id)
            b.low.append(w)
        else:
            w = _Waiter(loop.create_future(), priority, arrival, self._seq, now, request_id)
            b.queue.append(w)
            if self._priority:
                heapq.heappush(b.heap, (w.key, w))
        b.waiting += 1
        # Deadlines are resolved by the backend's timer callback rather than asyncio.timeout(): the
        # waiter is resolved inside the loop without cancelling our task, so a timeout can never be
        # confused with a real cancellation.
        deadline = loop.time() + wait_limit
        heapq.heappush(b.deadlines, (deadline, self._seq, w))
        if b.timer is None or deadline < b.timer_when:
            self._arm_timer(b, loop, deadline)
        try:
            granted = await w.fut
        except asyncio.CancelledError:
            if w.state is _GRANTED:
                # The permit was handed to us in the same loop step as the cancellation: pass it on,
                # otherwise it is lost for good.
                self._release(b)
            elif w.state is _WAITING:
                w.state = _CANCELLED
                b.waiting -= 1
                self._maybe_compact(b)
            raise
        waited = self._clock() - w.enqueued
        if not granted:
            raise BusyError(b.name, "timeout", self._retry_after(b), waited, b.in_progress, b.waiting, b.limit)
        if ctx is not None:
            ctx.permit_wait_s += waited
        return waited

    def _arm_timer(self, b: _Backend, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if b.timer is not None:
            b.timer.cancel()
        b.timer = loop.call_at(when, self._on_deadline, b, loop)
        b.timer_when = when

    def _on_deadline(self, b: _Backend, loop: asyncio.AbstractEventLoop) -> None:
        """Time out every waiter whose deadline passed, then re-arm for the earliest live deadline.

        The timer is not cancelled when its waiter gets a permit: letting it fire once for nothing is
        cheaper than cancelling and re-arming per waiter under sustained load.
        """
        b.timer = None
        if loop is not self._loop:
            return  # left over from a loop the manager has since been rebound from
        now = loop.time() + _CLOCK_RESOLUTION
        deadlines = b.deadlines
        expired = False
        while deadlines and deadlines[0][0] <= now:
            w = heapq.heappop(deadlines)[2]
            # A waiter whose future is already cancelled is left to its own CancelledError handler.
            if w.state is _WAITING and not w.fut.done():
                w.state = _TIMED_OUT
                b.waiting -= 1
                b.total_timeout += 1
                w.fut.set_result(False)
                expired = True
        while deadlines and deadlines[0][2].state is not _WAITING:
            heapq.heappop(deadlines)
        if deadlines:
            self._arm_timer(b, loop, deadlines[0][0])
        if expired:
            self._maybe_compact(b)

    def _release(self, b: _Backend) -> None:
        if b.in_progress <= 0:
            raise RuntimeError(f"LLM backend {b.name!r}: release without a matching acquire")
        b.in_progress -= 1
        b.total_released += 1
        if b.waiting:
            self._wake(b)

    def _wake(self, b: _Backend) -> None:
        """Hand free permits directly to the next waiters (no barging: in_progress is never lowered first)."""
        now = self._clock()
        while b.waiting and b.in_progress < b.limit:
            w = self._pop_next(b, now)
            if w is None:
                break
            w.state = _GRANTED
            b.waiting -= 1
            b.in_progress += 1
            b.total_acquired += 1
            b.samples.append((now, now - w.enqueued))
            w.fut.set_result(True)
        self._maybe_compact(b)

    def _pop_next(self, b: _Backend, now: float) -> _Waiter | None:
        """The waiter a free permit goes to: a request's (see the class docstring for the order), else the oldest
        low-priority one, which therefore never goes ahead of a request and is never boosted."""
        head = _first_waiting(b, b.queue)
        if head is None:
            low = _first_waiting(b, b.low)
            if low is not None:
                b.low.popleft()
            return low
        # The deque head is the oldest live waiter: if anyone is boosted, it is, and it is the oldest.
        if not self._priority or now - head.enqueued >= self._starvation_threshold:
            b.queue.popleft()
            return head
        heap = b.heap
        while heap:
            w = heapq.heappop(heap)[1]
            if _still_waiting(b, w):
                return w  # stays in the deque as a dead entry, dropped when it reaches the head
        return None  # unreachable while the invariant "every live waiter is in the heap" holds

    def _maybe_compact(self, b: _Backend) -> None:
        if not b.waiting:
            # Nobody is waiting, so every remaining entry is dead. The timer is left armed on purpose
            # (see _on_deadline); it finds an empty heap and stops.
            b.drop_queued()
            return
        bound = 2 * b.waiting + _COMPACT_SLACK
        if len(b.queue) > bound:
            b.queue = _without_dead(b.queue)
        if len(b.low) > bound:
            b.low = _without_dead(b.low)
        if len(b.heap) > bound:
            b.heap = _heap_without_dead(b.heap)
        if len(b.deadlines) > bound:
            b.deadlines = _heap_without_dead(b.deadlines)

    def _retry_after(self, b: _Backend) -> float:
        """Estimate for BusyError.retry_after: the work queued ahead of a new caller, (waiters + 1) x the mean
        time a recent call held its permit / limit (the one more is the caller's own turn); p90 of recent waits
        when no call finished lately. Between 1 s and _RETRY_AFTER_MAX_S."""
        now = self._clock()
        cached = b.retry_cache
        if cached is not None and now - cached[0] < _RETRY_AFTER_CACHE_S:
            return cached[1]
        holds = [held for released, held in b.holds if now - released <= _HOLD_HORIZON_S]
        queued = (b.waiting + 1) * (sum(holds) / len(holds)) / b.limit if holds else 0.0
        estimate = queued if holds else b.window.summary(now)["p90"]
        value = min(max(estimate, 1.0), _RETRY_AFTER_MAX_S)
        b.retry_cache = (now, value)
        return value

    # ------------------------------------------------------------------ loop binding

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        old = self._loop
        if old is not None and not self._idle():
            if not old.is_closed():
                raise RuntimeError("LLMConcurrencyManager is in use on another event loop; use one manager per loop")
            # A closed loop can never release its permits or resolve its waiters: drop that state
            # rather than leaving the semaphores permanently short.
            logger.warning("LLM concurrency manager: previous event loop closed with permits out; resetting")
            for b in self._backends.values():
                b.in_progress = 0
                b.waiting = 0
                b.drop_queued()
        for b in self._backends.values():
            # Deadline timers belong to the old loop; a new waiter arms one on the new loop.
            if b.timer is not None:
                b.timer.cancel()
                b.timer = None
        self._loop = loop

    def _idle(self) -> bool:
        return all(b.in_progress == 0 and b.waiting == 0 for b in self._backends.values())

    # ------------------------------------------------------------------ configuration

    def _new_backend(self, name: str, limit: int) -> _Backend:
        return _Backend(name, limit, WaitWindow(self._window_size, self._window_seconds))

    def _get_backend(self, backend: str) -> _Backend:
        try:
            return self._backends[backend]
        except KeyError:
            known = ", ".join(sorted(self._backends))
            raise ValueError(f"unknown LLM backend {backend!r}; configured backends: {known}") from None

    def set_limit(self, backend: str, n: int) -> None:
        """Change a backend's limit at run time (adds the backend if new).

        Up: queued waiters are admitted at once. Down: in-flight calls finish normally and nobody new
        is admitted until in_progress drops below the new limit. No permit is created or lost.
        """
        n = _check_limit(backend, n)
        b = self._backends.get(backend)
        if b is None:
            self._backends[backend] = self._new_backend(backend, n)
            return
        b.limit = n
        if b.waiting and b.in_progress < n:
            self._wake(b)

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

        if starvation_threshold is not None:
            self._starvation_threshold = starvation_threshold
        if acquire_timeout is not None:
            self._acquire_timeout = acquire_timeout
        if max_waiters is not None:
            self._max_waiters = max_waiters
        if priority_enabled is not None and bool(priority_enabled) != self._priority:
            self._priority = bool(priority_enabled)
            for b in self._backends.values():
                # The deque always holds every live waiter; the heap is only an index over it, so it
                # is rebuilt from the deque (entering priority) or dropped (leaving it).
                if self._priority:
                    b.heap = [(w.key, w) for w in b.queue if w.state is _WAITING]
                    heapq.heapify(b.heap)
                else:
                    b.heap = []
        for name, n in new_limits.items():
            self.set_limit(name, n)
        # A shorter starvation threshold or a mode switch changes who is next but frees no permit,
        # so nothing needs waking beyond what set_limit did.

    # ------------------------------------------------------------------ stats

    def stats(self, *, queue_head: int = 5) -> ManagerStats:
        """A snapshot for dashboards/health checks; read-only, so it may also be called off the loop."""
        now = self._clock()
        return {
            "mode": self.mode,
            "starvation_threshold": self._starvation_threshold,
            "acquire_timeout": self._acquire_timeout,
            "max_waiters": self._max_waiters,
            "live_requests": len(live_request_contexts()),
            "auxiliary_skipped": dict(self._skipped),
            "backends": {name: self._backend_stats(b, now, queue_head) for name, b in list(self._backends.items())},
        }

    def _backend_stats(self, b: _Backend, now: float, head_size: int) -> BackendStats:
        waits = b.window.summary(now)
        return {
            "limit": b.limit,
            "available": max(0, b.limit - b.in_progress),
            "in_progress": b.in_progress,
            "waiting": b.waiting,
            "total_acquired": b.total_acquired,
            "total_released": b.total_released,
            "total_timeout": b.total_timeout,
            "total_rejected": b.total_rejected,
            "wait_samples": waits["samples"],
            "wait_ms_p50": round(waits["p50"] * 1000.0, 3),
            "wait_ms_p95": round(waits["p95"] * 1000.0, 3),
            "wait_ms_p99": round(waits["p99"] * 1000.0, 3),
            "max_wait_ms": round(waits["max"] * 1000.0, 3),
            "queue_head": self._queue_head(b, now, head_size),
        }

    def _queue_head(self, b: _Backend, now: float, size: int) -> list[QueueHeadEntry]:
        """The first ``size`` waiters in the order they would be served if permits freed up now."""
        if size <= 0:
            return []
        live = _waiting_now(b.queue)
        threshold = self._starvation_threshold
        if self._priority:
            # Boosted waiters are a prefix of the arrival-ordered list; the rest go by heap key.
            n_boosted = 0
            while n_boosted < len(live) and now - live[n_boosted].enqueued >= threshold:
                n_boosted += 1
            order = live[:n_boosted]
            if len(order) < size:
                order += heapq.nsmallest(size - len(order), live[n_boosted:], key=lambda w: w.key)
        else:
            order = live
        if len(order) < size:
            order += _waiting_now(b.low)
        return [
            {
                "request_id": w.request_id,
                "priority": w.priority,
                "waited_ms": round((now - w.enqueued) * 1000.0, 3),
                "boosted": self._priority and w.priority != LOW_PRIORITY and now - w.enqueued >= threshold,
            }
            for w in order[:size]
        ]


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
