"""One background fetch at a time per key: the refresh behind stale-while-revalidate prompt copies.

A request that finds its Langfuse copy expired serves it and asks for a refresh here; every request that comes
while that fetch runs gets the same future instead of starting another, so a slow or unreachable Langfuse costs
one fetch per prompt at a time, never one per request. Fetches run on daemon threads (one per key in flight,
at most `max_in_flight`), so a hung fetch never holds up the process's exit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SingleFlight:
    def __init__(self, *, name: str, max_in_flight: int = 16) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._name = name
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight: dict[Hashable, Future] = {}

    def start(self, key: Hashable, job: Callable[[], T]) -> Future[T] | None:
        """The future of the fetch running for `key`, starting `job` on a thread if none is; None when
        `max_in_flight` fetches already run (the caller serves what it has)."""
        with self._lock:
            running = self._in_flight.get(key)
            if running is not None:
                return running
            if len(self._in_flight) >= self._max_in_flight:
                return None
            future: Future[T] = Future()
            self._in_flight[key] = future
        thread = threading.Thread(target=self._run, args=(key, job, future), name=self._name, daemon=True)
        try:
            thread.start()
        except BaseException:
            self._finish(key)
            raise
        return future

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no fetch runs (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def _run(self, key: Hashable, job: Callable[[], T], future: Future[T]) -> None:
        try:
            result = job()
        except BaseException as exc:  # the job reports its own failures; this keeps waiters from hanging
            logger.exception("%s: background fetch for %r failed", self._name, key)
            self._finish(key)
            future.set_exception(exc)
            return
        self._finish(key)
        future.set_result(result)

    def _finish(self, key: Hashable) -> None:
        with self._idle:
            self._in_flight.pop(key, None)
            self._idle.notify_all()
