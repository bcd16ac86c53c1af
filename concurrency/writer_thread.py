"""One background writer thread fed by a bounded queue: the one copy of the drain code the exporters share.

Policy, stated once:

- `submit` never blocks: it is called on the request path (often on the event loop). A full queue, or a writer
  that is closed or dead, drops the item and counts it in `dropped`; the caller learns it from the return value.
- `put` blocks up to its timeout, for the few items that must not be dropped (a flush or stop command queued
  behind everything submitted); off the event loop only.
- Items are handled one at a time, in order. An exception from `handle` is logged and counted in `errors` and the
  thread goes on, unless it is one of `fatal`: then the thread ends (the writer is closed; later submits drop).
- After each item the thread hands the GIL back at once (`time.sleep(0)`) rather than at the interpreter's next
  forced switch (up to 5 ms later): the event loop needs it far more urgently than the next item.
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
from typing import Generic, TypeVar

__all__ = ["WriterThread"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_STOP = object()
# An idle writer looks this often whether it was closed without its stop item (a full queue at `close`).
_IDLE_CHECK_SECONDS = 1.0


class WriterThread(Generic[T]):
    def __init__(
        self,
        handle: Callable[[T], None],
        *,
        name: str,
        queue_size: int,
        fatal: tuple[type[BaseException], ...] = (),
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1: every queue has a bound")
        self.name = name
        self.queue_size = queue_size
        self.dropped = 0
        self.handled = 0
        self.errors = 0
        self._handle = handle
        self._fatal = fatal
        self._on_exit = on_exit
        self._queue: queue.Queue[T | object] = queue.Queue(maxsize=queue_size)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

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
                    item = self._queue.get(timeout=_IDLE_CHECK_SECONDS)
                except queue.Empty:
                    if self._closed:
                        return  # closed while its stop could not be queued: nothing is left to wait for
                    continue
                try:
                    if item is _STOP:
                        return
                    self._handle(item)  # type: ignore[arg-type]
                    self.handled += 1
                except self._fatal as exc:
                    logger.error("%s: %s; the writer stops", self.name, exc)
                    self._closed = True
                    return
                except Exception:
                    self.errors += 1
                    logger.exception("%s: handling an item failed", self.name)
                finally:
                    self._queue.task_done()
                time.sleep(0)
        finally:
            self._closed = True
            self._forget_queued()
            if self._on_exit is not None:
                self._on_exit()

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
