"""One background writer thread fed by a bounded queue: the one copy of the drain code the exporters share.

Policy, stated once:

- `submit` never blocks: it is called on the request path (often on the event loop). A full queue, or a writer
  that is closed or dead, drops the item and counts it in `dropped`; the caller learns it from the return value.
- `put` blocks up to its timeout, for the few items that must not be dropped (a flush or stop command queued
  behind everything submitted); off the event loop only.
- Items are handled in order, one unit of work at a time: one item (`handle`), or with `handle_batch` every item
  queued by then, up to `batch_size`. An exception from the handler is logged and counted in `errors` (once per
  unit) and the thread goes on, unless it is one of `fatal`: then the thread ends (the writer is closed; later
  submits drop).
- `tick`, when given, is the writer's periodic work: it is called after each unit of work, when the delay it last
  returned ran out with nothing queued (the first time `tick_after` seconds after the start), and once more with
  True as the thread stops. It returns how many seconds may pass before its next call; an exception from it is
  logged and counted, and it is then called again at the next idle check.
- `after`, when given, runs after each unit of work and each tick, whatever they raised (e.g. releasing the
  database connections a unit of work opened, as the end of a request would).
- What is queued is handled before `drain` learns of it: a unit's tick and `after` run before its items count
  as done.
- After each unit the thread hands the GIL back at once (`time.sleep(0)`) rather than at the interpreter's next
  forced switch (up to 5 ms later): the event loop needs it far more urgently than the next item.
- The thread starts with the writer, or with `start=False` at the first `start()` (items submitted before wait in
  the queue); closing a writer whose thread never started lets its queued items go, counted in `dropped`.
  `started_at` says when it started, for a tick that keeps schedules of its own.
- `drain(timeout)` waits until everything queued so far was handled; `close(timeout)` drains, stops the thread and
  joins it, each step bounded by `timeout`: a stuck writer never holds a shutdown. A closed writer's thread ends
  once its queue is empty, even when the stop item found no room.

Counters are plain integers written by one thread each (`dropped` by submitters, the rest by the writer): gauges
for staff, not invoices; a lock would be one more thing on the request path.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar, cast

__all__ = ["WriterThread"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_STOP = object()
# An idle writer looks this often whether it was closed without its stop item (a full queue at `close`).
_IDLE_CHECK_SECONDS = 1.0


class WriterThread(Generic[T]):
    def __init__(
        self,
        handle: Callable[[T], None] | None = None,
        *,
        name: str,
        queue_size: int,
        handle_batch: Callable[[list[T]], None] | None = None,
        batch_size: int = 1,
        fatal: tuple[type[BaseException], ...] = (),
        on_exit: Callable[[], None] | None = None,
        tick: Callable[[bool], float] | None = None,
        tick_after: float = _IDLE_CHECK_SECONDS,
        after: Callable[[], None] | None = None,
        start: bool = True,
    ) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1: every queue has a bound")
        if (handle is None) == (handle_batch is None):
            raise ValueError("give one of handle (an item at a time) and handle_batch (a list at a time)")
        if batch_size < 1 or (handle is not None and batch_size != 1):
            raise ValueError("batch_size must be at least 1, and 1 unless items are handled by handle_batch")
        self.name = name
        self.queue_size = queue_size
        self.dropped = 0
        self.handled = 0
        self.errors = 0
        self._handle_batch: Callable[[list[T]], None] = (
            handle_batch if handle_batch is not None else _one_at_a_time(cast(Callable[[T], None], handle))
        )
        self._batch_size = batch_size
        self._fatal = fatal
        self._on_exit = on_exit
        self._tick = tick
        self._tick_after = tick_after
        self._next_tick: float | None = None  # monotonic time of the next idle tick; None: at the next idle check
        self._after = after
        self._queue: queue.Queue[T | object] = queue.Queue(maxsize=queue_size)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._start_lock = threading.Lock()
        self._started = False
        self._started_at: float | None = None  # time.monotonic() at the start
        if start:
            self.start()

    def start(self) -> None:
        """Start the thread if it has not started yet and the writer is not closed (idempotent, thread-safe)."""
        if self._started:
            return
        with self._start_lock:
            if self._started or self._closed:
                return
            self._started_at = time.monotonic()
            self._next_tick = self._started_at + self._tick_after
            self._thread.start()
            self._started = True

    @property
    def started(self) -> bool:
        return self._started

    @property
    def started_at(self) -> float | None:
        """`time.monotonic()` when the thread was started; None before."""
        return self._started_at

    # --- producers ---------------------------------------------------------------------------------------------
    def submit(self, item: T) -> bool:
        """Queue `item` without blocking; False (and counted as dropped) when full or closed."""
        if self._closed:
            self.dropped += 1
            return False
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def put(self, item: T, timeout: float) -> bool:
        """Queue `item`, waiting up to `timeout` seconds for room; False if closed or still full."""
        if self._closed:
            return False
        try:
            self._queue.put(item, timeout=max(timeout, 0.0))
        except queue.Full:
            return False
        return True

    # --- the thread --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                try:
                    item = self._queue.get(timeout=self._idle_wait())
                except queue.Empty:
                    if self._closed:
                        self._final_tick()
                        return  # closed while its stop could not be queued: nothing is left to wait for
                    if self._tick is not None and (self._next_tick is None or time.monotonic() >= self._next_tick):
                        self._tick_and_after(stopping=False)
                    continue
                batch, taken, stopping = self._take(item)
                try:
                    fatal = self._handle_unit(batch)
                    if not fatal:
                        self._tick_and_after(stopping=stopping)
                finally:
                    self._done(taken)
                if fatal or stopping:
                    return
                time.sleep(0)
        finally:
            self._closed = True
            self._forget_queued()
            if self._on_exit is not None:
                self._on_exit()

    def _handle_unit(self, batch: list[T]) -> bool:
        """Handle one unit of work; True if it failed with one of `fatal` (the writer is then closed)."""
        if not batch:
            return False
        try:
            self._handle_batch(batch)
            self.handled += len(batch)
        except self._fatal as exc:
            logger.error("%s: %s; the writer stops", self.name, exc)
            self._closed = True
            return True
        except Exception:
            self.errors += 1
            logger.exception("%s: handling an item failed", self.name)
        return False

    def _idle_wait(self) -> float:
        if self._tick is None or self._next_tick is None:
            return _IDLE_CHECK_SECONDS
        return min(max(self._next_tick - time.monotonic(), 0.0), _IDLE_CHECK_SECONDS)

    def _take(self, first: T | object) -> tuple[list[T], int, bool]:
        """The unit of work starting with `first`: up to `batch_size` items already queued; whether the stop
        item came (it ends the unit), and how many queue entries were taken."""
        batch: list[T] = []
        taken = 1
        item = first
        while True:
            if item is _STOP:
                return batch, taken, True
            batch.append(cast(T, item))
            if len(batch) >= self._batch_size:
                return batch, taken, False
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, taken, False
            taken += 1

    def _done(self, taken: int) -> None:
        for _ in range(taken):
            self._queue.task_done()

    def _tick_and_after(self, *, stopping: bool) -> None:
        try:
            if self._tick is not None:
                self._next_tick = None
                try:
                    self._next_tick = time.monotonic() + self._tick(stopping)
                except Exception:
                    self.errors += 1
                    logger.exception("%s: its periodic work failed", self.name)
        finally:
            if self._after is not None:
                try:
                    self._after()
                except Exception:
                    self.errors += 1
                    logger.exception("%s: its work after a unit failed", self.name)

    def _final_tick(self) -> None:
        if self._tick is not None:
            self._tick_and_after(stopping=True)

    def _forget_queued(self) -> None:
        # Nobody will handle them: count them dropped and let a `drain` waiting on them return.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                self.dropped += 1
            self._queue.task_done()

    # --- lifecycle (blocking: call off the event loop) ---------------------------------------------------------
    def drain(self, timeout: float) -> bool:
        """Wait until everything queued so far was handled; False if `timeout` ran out first."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def close(self, timeout: float, *, drain: bool = True) -> bool:
        """Stop taking items, handle what is queued (when `drain`), stop the thread and join it; False if it had
        not stopped within `timeout` seconds in all (it is a daemon thread: it cannot hold the process)."""
        deadline = time.monotonic() + timeout
        with self._start_lock:
            never_started = not self._started
            if never_started:
                self._closed = True
        if never_started:
            self._forget_queued()  # no thread will ever handle them
            return True
        if drain:
            self.drain(timeout)
        self._closed = True
        if self._thread.is_alive():
            try:
                self._queue.put(_STOP, timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Full:
                logger.warning("%s did not stop within %.1f s", self.name, timeout)
                return False
        self._thread.join(max(deadline - time.monotonic(), 0.01))
        return not self._thread.is_alive()

    # --- state -------------------------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self._queue.qsize()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stats(self) -> dict[str, int]:
        return {
            "pending": self.pending,
            "queue_size": self.queue_size,
            "dropped": self.dropped,
            "handled": self.handled,
            "errors": self.errors,
        }


def _one_at_a_time(handle: Callable[[T], None]) -> Callable[[list[T]], None]:
    def handle_batch(batch: list[T]) -> None:
        for item in batch:
            handle(item)

    return handle_batch
