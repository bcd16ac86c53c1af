"""The permits of this process alone: one fair semaphore per backend, in memory (a ``PermitSource``).

Why not ``asyncio.Semaphore``: we need FIFO or priority ordering, direct handoff (a released permit goes to the next
waiter, never to a task that arrives later and "barges" in), deadlines per waiter and live resizing. The order: FIFO
by default; in priority mode the lowest priority first (``PermitAsk``), ties to the older request, then enqueue
order, and once the oldest waiter has waited ``starvation_threshold`` seconds it is boosted and served before any
unboosted waiter (boosted waiters go oldest first). Low-priority waiters go after every other waiter, in both modes.

Threading model: like the rest of asyncio, a source is used from one event loop at a time. It binds to the running
loop on first use and refuses another running loop while it has permits out or waiters queued (futures of one loop
cannot be resolved from another). ``set_limit``/``set_order`` must run on the loop's thread; the reads (``here``,
``queue_head``) may run off it.

Pure asyncio/stdlib: nothing here may import Django, chat or the RAG pipeline.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from .permits import LOW_PRIORITY, Occupancy, PermitAsk
from .stats import ClusterStats, QueueHeadEntry

__all__ = ["LocalGrant", "LocalPermits"]

logger = logging.getLogger(__name__)

_E = TypeVar("_E", bound=tuple[Any, ...])  # a heap entry whose last item is its waiter

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
    """One queued take. Lives in the backend's arrival deque and, in priority mode, also in its heap."""

    __slots__ = ("enqueued", "fut", "key", "priority", "request_id", "state")

    def __init__(self, fut: asyncio.Future[bool], ask: PermitAsk, seq: int, enqueued: float) -> None:
        self.fut = fut
        self.priority = ask.priority
        # Heap key: priority, then request arrival (older request first), then enqueue order. seq is
        # unique, so tuples never fall through to comparing the waiter itself.
        self.key = (ask.priority, ask.arrival, seq)
        self.enqueued = enqueued
        self.request_id = ask.request_id
        self.state = _WAITING


class _Backend:
    """One backend's semaphore; also the grant this source hands out (giving it back needs no lookup)."""

    __slots__ = ("deadlines", "heap", "in_progress", "limit", "low", "name", "queue", "timer", "timer_when", "waiting")

    def __init__(self, name: str, limit: int) -> None:
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


# What this source hands out and takes back (opaque to everyone else).
LocalGrant = _Backend


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


class LocalPermits:
    """Per-backend fair semaphores of this process; see the module docstring. Grants are the backends themselves."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._backends: dict[str, _Backend] = {}
        self._priority = False
        self._starvation_threshold = 10.0
        self._seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ configuration

    def set_limit(self, backend: str, limit: int) -> None:
        b = self._backends.get(backend)
        if b is None:
            self._backends[backend] = _Backend(backend, limit)
            return
        b.limit = limit
        if b.waiting and b.in_progress < limit:
            self._wake(b)

    def set_order(self, *, priority: bool, starvation_threshold: float) -> None:
        # A shorter starvation threshold or a mode switch changes who is next but frees no permit, so nobody
        # needs waking.
        self._starvation_threshold = starvation_threshold
        if priority == self._priority:
            return
        self._priority = priority
        for b in self._backends.values():
            # The deque always holds every live waiter; the heap is only an index over it, so it is rebuilt from
            # the deque (entering priority) or dropped (leaving it).
            if priority:
                b.heap = [(w.key, w) for w in b.queue if w.state is _WAITING]
                heapq.heapify(b.heap)
            else:
                b.heap = []

    # ------------------------------------------------------------------ taking and giving back

    def try_take(self, backend: str) -> _Backend | None:
        if asyncio.get_running_loop() is not self._loop:
            self._bind_loop()
        b = self._backends[backend]
        # Checking `waiting` keeps newcomers from overtaking queued waiters.
        if not b.waiting and b.in_progress < b.limit:
            b.in_progress += 1
            return b
        return None

    async def take(self, backend: str, ask: PermitAsk, wait: float, *, may_queue: bool) -> _Backend | None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind_loop()
        b = self._backends[backend]
        if not b.waiting and b.in_progress < b.limit:
            b.in_progress += 1
            return b
        if not may_queue or wait <= 0:
            return None
        self._seq += 1
        w = _Waiter(loop.create_future(), ask, self._seq, self._clock())
        if ask.priority == LOW_PRIORITY:
            b.low.append(w)
        else:
            b.queue.append(w)
            if self._priority:
                heapq.heappush(b.heap, (w.key, w))
        b.waiting += 1
        # Deadlines are resolved by the backend's timer callback rather than asyncio.timeout(): the
        # waiter is resolved inside the loop without cancelling our task, so a timeout can never be
        # confused with a real cancellation.
        deadline = loop.time() + wait
        heapq.heappush(b.deadlines, (deadline, self._seq, w))
        if b.timer is None or deadline < b.timer_when:
            self._arm_timer(b, loop, deadline)
        try:
            granted = await w.fut
        except asyncio.CancelledError:
            if w.state is _GRANTED:
                # The permit was handed to us in the same loop step as the cancellation: pass it on,
                # otherwise it is lost for good.
                self.give_back(backend, b)
            elif w.state is _WAITING:
                w.state = _CANCELLED
                b.waiting -= 1
                self._maybe_compact(b)
            raise
        return b if granted else None

    def occupy(self, backend: str) -> _Backend:
        """Count a permit that is running anyway (one drawn elsewhere), even past the limit; give it back as any."""
        b = self._backends[backend]
        b.in_progress += 1
        return b

    def give_back(self, backend: str, grant: _Backend) -> None:
        if grant.in_progress <= 0:
            raise RuntimeError(f"LLM backend {backend!r}: release without a matching acquire")
        grant.in_progress -= 1
        if grant.waiting:
            self._wake(grant)

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
            return  # left over from a loop the source has since been rebound from
        now = loop.time() + _CLOCK_RESOLUTION
        deadlines = b.deadlines
        expired = False
        while deadlines and deadlines[0][0] <= now:
            w = heapq.heappop(deadlines)[2]
            # A waiter whose future is already cancelled is left to its own CancelledError handler.
            if w.state is _WAITING and not w.fut.done():
                w.state = _TIMED_OUT
                b.waiting -= 1
                w.fut.set_result(False)
                expired = True
        while deadlines and deadlines[0][2].state is not _WAITING:
            heapq.heappop(deadlines)
        if deadlines:
            self._arm_timer(b, loop, deadlines[0][0])
        if expired:
            self._maybe_compact(b)

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
            w.fut.set_result(True)
        self._maybe_compact(b)

    def _pop_next(self, b: _Backend, now: float) -> _Waiter | None:
        """The waiter a free permit goes to: a request's (see the module docstring for the order), else the oldest
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

    # ------------------------------------------------------------------ reads

    def here(self, backend: str) -> Occupancy:
        b = self._backends[backend]
        return Occupancy(b.in_progress, b.waiting, b.limit)

    occupancy = here

    def queue_head(self, backend: str, size: int) -> list[QueueHeadEntry]:
        if size <= 0:
            return []
        b = self._backends[backend]
        now = self._clock()
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

    def cluster_stats(self) -> ClusterStats | None:
        return None

    async def aclose(self) -> None:
        return None
