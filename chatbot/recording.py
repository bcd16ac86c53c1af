"""The thread that records exchanges, with a database connection it keeps from one answer to the next.

Under ASGI a request thread's connection is closed after every call (`CONN_MAX_AGE = 0`, which stays: Channels'
thread hops close it around each call). For the recording of an answer, one short transaction per answer, opening
a connection (PostgreSQL: a TCP handshake and authentication; SQLite: a file and its pragmas) costs more than the
write. So exchanges are written by one thread of their own whose connection lives across calls:

- checked (`SELECT 1`) before a call when it has been idle for `idle_check_seconds` (a server or a proxy may have
  dropped it meanwhile), and after a call that failed; an unusable one is closed, and the next call opens a new one;
- closed, with the thread, by `aclose()` when the worker stops (after the last writes of its drain).

Calls are bounded. At most `max_pending` are queued for the thread (or running in it) at once; one more waits for a
place. No call waits more than `queue_timeout` seconds in all, for a place and then for the thread, before it starts:
past that it fails with `RecorderBusy` and has written nothing. The thread checks the same deadline when it takes a
call up, so a call whose caller has given up, or is about to, is never run late. Once started, a call is waited for
until it ends: its real outcome is what the caller gets, for at most `outcome_timeout` seconds more; past that it
fails with `OutcomeUnknown`, logged as an unknown outcome, not as a failure: it may still commit.

Calls come from one event loop at a time (the server's); the places are counted per loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

__all__ = ["ExchangeRecorder", "OutcomeUnknown", "RecorderBusy", "exchange_recorder", "failure_words"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RecorderBusy(RuntimeError):
    """The call did not start within its `queue_timeout`: it was not run, nothing was written."""


class OutcomeUnknown(TimeoutError):
    """The call started but had not ended within `outcome_timeout`: it may still commit, or fail."""


class ExchangeRecorder:
    def __init__(
        self,
        *,
        idle_check_seconds: float = 30.0,
        max_pending: int = 1000,
        queue_timeout: float = 30.0,
        outcome_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        alias: str = DEFAULT_DB_ALIAS,
    ) -> None:
        self.idle_check_seconds = idle_check_seconds
        self.max_pending = max_pending
        self.queue_timeout = queue_timeout
        self.outcome_timeout = outcome_timeout
        self.alias = alias
        self._clock = clock  # the idle checks and the queue deadline
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._last_used = -math.inf
        self._places_loop: asyncio.AbstractEventLoop | None = None
        self._places = asyncio.Semaphore(max_pending)
        self.connections_opened = 0  # how many connections the thread has opened (tests, logs)

    def _thread(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-recorder")
            return self._executor

    def _places_here(self) -> asyncio.Semaphore:
        # An asyncio semaphore serves the loop it first waited on; a new loop (each test has its own) gets a new one.
        loop = asyncio.get_running_loop()
        if self._places_loop is not loop:
            self._places_loop, self._places = loop, asyncio.Semaphore(self.max_pending)
        return self._places

    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """`fn(**kwargs)` in the recording thread, on its kept connection.

        Raises `RecorderBusy` when it could not start within `queue_timeout` (it never runs), `OutcomeUnknown` when
        it started but did not end within `outcome_timeout` more.
        """
        deadline = self._clock() + self.queue_timeout
        places = self._places_here()
        try:
            async with asyncio.timeout(self.queue_timeout):
                await places.acquire()
        except TimeoutError:
            raise RecorderBusy(f"no place within {self.queue_timeout} s: {self.max_pending} calls are queued") from None
        try:
            return await self._outcome(self._thread().submit(self._call, fn, kwargs, deadline), deadline)
        finally:
            places.release()

    async def _outcome(self, job: Future[T], deadline: float) -> T:
        outcome = asyncio.wrap_future(job)
        try:
            await asyncio.wait({outcome}, timeout=max(0.0, deadline - self._clock()))
        except asyncio.CancelledError:
            job.cancel()  # not started yet: it never will be; started: it ends on its own
            raise
        if not outcome.done() and job.cancel():  # `cancel()` fails once the thread has started the call
            raise RecorderBusy(f"the recording thread did not take the call up within {self.queue_timeout} s")
        try:
            done, _ = await asyncio.wait({outcome}, timeout=self.outcome_timeout)
        except asyncio.CancelledError:
            outcome.add_done_callback(_late_outcome_log)  # its caller has gone; the call goes on
            raise
        if done:
            return outcome.result()
        logger.error(
            "a call in the recording thread is still running %.1f s past its queue deadline; its outcome is unknown"
            " (it may still commit)",
            self.outcome_timeout,
        )
        outcome.add_done_callback(_late_outcome_log)
        raise OutcomeUnknown(f"still running {self.outcome_timeout} s past its queue deadline; the outcome is unknown")

    def _call(self, fn: Callable[..., T], kwargs: dict[str, Any], deadline: float) -> T:
        if self._clock() > deadline:  # its caller gives up on it now, if it has not already: it must not write late
            raise RecorderBusy(f"waited more than {self.queue_timeout} s for the recording thread; not run")
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


def failure_words(exc: BaseException) -> str:
    """How a caller logs a call that raised: an `OutcomeUnknown` may still commit, so it is not called failed."""
    return "has an unknown outcome" if isinstance(exc, OutcomeUnknown) else "failed"


def _late_outcome_log(outcome: asyncio.Future[Any]) -> None:
    if not outcome.cancelled():
        exc = outcome.exception()
        logger.warning("a call no longer waited for has ended: %s", f"failed: {exc!r}" if exc else "done")


_recorder = ExchangeRecorder()


def exchange_recorder() -> ExchangeRecorder:
    """The process's recording thread."""
    return _recorder
