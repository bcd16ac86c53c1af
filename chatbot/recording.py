"""The thread that records exchanges, with a database connection it keeps from one answer to the next.

Under ASGI a request thread's connection is closed after every call (`CONN_MAX_AGE = 0`, which stays: Channels'
thread hops close it around each call). For the recording of an answer, one short transaction per answer, opening
a connection (PostgreSQL: a TCP handshake and authentication; SQLite: a file and its pragmas) costs more than the
write. So exchanges are written by one thread of their own whose connection lives across calls:

- checked (`SELECT 1`) before a call when it has been idle for `idle_check_seconds` (a server or a proxy may have
  dropped it meanwhile), and after a call that failed; an unusable one is closed, and the next call opens a new one;
- closed, with the thread, by `aclose()` when the worker stops (after the last writes of its drain).

Calls are bounded: at most `max_pending` wait for the thread at once; one more waits `queue_timeout` seconds for a
place, then fails (the caller logs it like any failed write).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

__all__ = ["ExchangeRecorder", "exchange_recorder"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ExchangeRecorder:
    def __init__(
        self,
        *,
        idle_check_seconds: float = 30.0,
        max_pending: int = 1000,
        queue_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        alias: str = DEFAULT_DB_ALIAS,
    ) -> None:
        self.idle_check_seconds = idle_check_seconds
        self.max_pending = max_pending
        self.queue_timeout = queue_timeout
        self.alias = alias
        self._clock = clock
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._last_used = -math.inf
        self._pending = 0
        self.connections_opened = 0  # how many connections the thread has opened (tests, logs)

    def _thread(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-recorder")
            return self._executor

    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """`fn(**kwargs)` in the recording thread, on its kept connection."""
        if self._pending >= self.max_pending:
            raise RuntimeError(f"{self._pending} exchange writes are already waiting for the database")
        self._pending += 1
        try:
            loop = asyncio.get_running_loop()
            call = functools.partial(self._call, fn, kwargs)
            return await asyncio.wait_for(loop.run_in_executor(self._thread(), call), self.queue_timeout)
        finally:
            self._pending -= 1

    def _call(self, fn: Callable[..., T], kwargs: dict[str, Any]) -> T:
        connection = connections[self.alias]
        if connection.connection is not None and self._clock() - self._last_used >= self.idle_check_seconds:
            self._drop_if_unusable(connection, "idle")
        if connection.connection is None:
            self.connections_opened += 1
        try:
            return fn(**kwargs)
        except Exception:
            if connection.connection is not None:
                self._drop_if_unusable(connection, "failed")
            raise
        finally:
            self._last_used = self._clock()

    @staticmethod
    def _usable(connection: Any) -> bool:
        # Not `is_usable()`: the SQLite backend's always says yes, even for a closed handle.
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except DatabaseError:
            return False
        return True

    def _drop_if_unusable(self, connection: Any, why: str) -> None:
        if self._usable(connection):
            connection.errors_occurred = False
            return
        logger.warning("the recording thread's database connection is unusable (%s); opening a new one", why)
        try:
            connection.close()
        except Exception as exc:  # closing a broken connection may fail too; it is dropped either way
            logger.debug("closing the broken connection failed: %r", exc)
            connection.connection = None

    def close(self, timeout: float = 5.0) -> None:
        """Close the thread's connection and stop the thread (a later `run` starts a new one)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            executor.submit(self._close_connection).result(timeout)
        except Exception as exc:
            logger.warning("could not close the recording thread's database connection: %r", exc)
        finally:
            executor.shutdown(wait=False)
            self._last_used = -math.inf

    def _close_connection(self) -> None:
        connections[self.alias].close()  # in the recording thread: a connection belongs to the thread that opened it

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


_recorder = ExchangeRecorder()


def exchange_recorder() -> ExchangeRecorder:
    """The process's recording thread."""
    return _recorder
