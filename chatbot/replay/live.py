"""One answer's events in this process: a pump task feeds them in, any number of transports tail them.

The pump is what decouples an answer from its transport: the pipeline's events go into the buffer whether or
not anyone is connected, so a `continue` answer runs to its end after its socket is gone and a client that comes
back reads exactly what it missed. The buffer is a ring of at most `max_events` events, so a runaway stream
cannot grow memory without bound (a resume that needs an event already dropped is refused, saying so).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Coroutine
from typing import TYPE_CHECKING, Any

from chatbot.streaming import ChatExchange, transport_error_event
from rag.events import TERMINAL_CHANNELS, Event

if TYPE_CHECKING:
    from chatbot.replay.redis_store import RedisStreamStore

logger = logging.getLogger(__name__)

# How long the copy in Redis lets events gather between two writes; the first event and the terminal one go at
# once. Another worker's reader polls every 0.2 s (`redis_store.POLL_SECONDS`), so it sees no difference, while a
# write per event was a Redis transaction per token, the largest cost of an answer with Redis (py-spy, 15 %).
MIRROR_BATCH_SECONDS = 0.05


class ResumeRefused(Exception):
    """A resume that cannot be served. `status` is the HTTP status for SSE; every transport uses the message."""

    def __init__(self, status: int, message: str, *, code: str = "bad_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class LiveStream:
    """The events of one request, kept in order while it runs and for the retention window after it ends."""

    def __init__(self, *, request_id: str, client_id: str, on_disconnect: str, max_events: int) -> None:
        self.request_id = request_id
        self.client_id = client_id
        self.on_disconnect = on_disconnect
        self.last_seq = 0
        self.terminal: Event | None = None
        self.finished_at: float | None = None  # time.monotonic() of the terminal event
        self.mirrored_seq = 0  # the last seq written to Redis
        self.mirror_failed = False
        # A list with the oldest tenth dropped at once when full (amortised O(1)), so that the events after a
        # seq are one slice away: element i has seq `self._first_seq + i`.
        self._events: list[Event] = []
        self._first_seq = 1
        self._max_events = max(10, max_events)
        # Replaced on every append: a tailer takes the current one before reading, so it cannot miss a wake-up.
        self._wake = asyncio.Event()
        self._ended = asyncio.Event()  # set with the terminal event
        self._exchange: ChatExchange | None = None
        # A stop asked for before the run's first event, applied with it: (code, message, payload) of the terminal.
        self._stop_pending: tuple[str, str, dict[str, Any]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the producer side ------------------------------------------------------------------------------------

    def start(self, exchange: ChatExchange, *, mirror: RedisStreamStore | None = None) -> None:
        self._exchange = exchange
        self._spawn(self._pump(exchange), f"relay-{self.request_id}")
        if mirror is not None:
            self._spawn(self._mirror(mirror), f"relay-mirror-{self.request_id}")

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)

    def append(self, event: Event) -> None:
        if self.terminal is not None:
            return  # one terminal per stream: anything after it is not part of the stream
        if len(self._events) >= self._max_events:
            dropped = max(1, self._max_events // 10)
            del self._events[:dropped]
            self._first_seq += dropped
        self._events.append(event)
        self.last_seq = event["seq"]
        if event["channel"] in TERMINAL_CHANNELS:
            self.terminal = event
            self.finished_at = time.monotonic()
            self._ended.set()
        elif self._stop_pending is not None and self._exchange is not None:
            pending, self._stop_pending = self._stop_pending, None
            self._stop_now(*pending)
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    async def _pump(self, exchange: ChatExchange) -> None:
        try:
            # aclosing: if this task is cancelled (server shutdown), the run's iterator is closed now, which
            # cancels the pipeline and frees its slot.
            async with contextlib.aclosing(exchange.events()) as events:
                async for event in events:
                    self.append(event)
                    if self.terminal is not None:
                        return
        except asyncio.CancelledError:
            self._end("cancelled", "the server stopped this answer")
            raise
        except Exception as exc:
            # The run broke off (e.g. no event within the idle timeout): the stream still ends with one terminal.
            logger.exception("stream %s failed", self.request_id)
            self._end("internal", f"internal error ({type(exc).__name__})")
        finally:
            self._end("internal", "the answer ended without a terminal event")

    def _end(self, code: str, message: str) -> None:
        if self.terminal is None:
            self.append(transport_error_event(code, message, request_id=self.request_id, after_seq=self.last_seq))

    async def _mirror(self, store: RedisStreamStore) -> None:
        """Copy events to Redis in batches: after each write, what arrives within `MIRROR_BATCH_SECONDS` (or until
        the terminal event, which is never held back) goes in the next one."""
        while True:
            wake = self._wake
            if self.mirrored_seq + 1 < self._first_seq:
                # Redis fell a whole ring behind: its copy would have a hole, so it stops being a copy.
                self.mirror_failed = True
                logger.warning(
                    "stream %s: Redis fell behind; resumes on other workers will be refused", self.request_id
                )
                await self._mirror_drop(store)
                return
            pending = self._events[self.mirrored_seq + 1 - self._first_seq :]
            if pending:
                try:
                    await store.append(self, pending, first=self.mirrored_seq == 0)
                except Exception as exc:
                    # The local copy still serves this worker; only a resume landing on another worker loses.
                    self.mirror_failed = True
                    logger.warning("could not keep stream %s in Redis: %r", self.request_id, exc)
                    await self._mirror_drop(store)
                    return
                self.mirrored_seq = pending[-1]["seq"]
                if self.terminal is None:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(MIRROR_BATCH_SECONDS):
                            await self._ended.wait()
                continue
            if self.terminal is not None:
                return
            await wake.wait()

    async def _mirror_drop(self, store: RedisStreamStore) -> None:
        # A partial copy would make another worker wait for a terminal event that never comes: better none.
        with contextlib.suppress(Exception):
            await store.discard(self.request_id)

    # --- control ----------------------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the answer; its stream then ends with the terminal `error` `cancelled`."""
        self._stop("cancelled", "", {})

    def interrupt(self, code: str, message: str, **payload: Any) -> None:
        """Stop the answer for a reason of the server's: its stream ends with the terminal `error` `code`."""
        self._stop(code, message, payload)

    def _stop(self, code: str, message: str, payload: dict[str, Any]) -> None:
        if self.terminal is not None or self._exchange is None:
            return
        if self.last_seq == 0:
            # The run's task may not have taken its first step: a task cancelled that early never reaches its own
            # `except CancelledError`, so the stop waits for the first event (emitted at once).
            self._stop_pending = (code, message, payload)
        else:
            self._stop_now(code, message, payload)

    def _stop_now(self, code: str, message: str, payload: dict[str, Any]) -> None:
        assert self._exchange is not None
        if code == "cancelled":
            self._exchange.cancel()
        else:
            self._exchange.interrupt(code, message, **payload)

    def transport_lost(self) -> None:
        """A transport stopped reading before the terminal event: apply the request's disconnect policy."""
        if self.on_disconnect == "cancel":
            self.cancel()

    @property
    def running(self) -> bool:
        return self.terminal is None

    async def ended(self) -> None:
        """Return once the stream has its terminal event (what holds resources for the run's life waits on it)."""
        await self._ended.wait()

    async def wait(self, max_wait: float = 5.0) -> None:
        """Wait until the relay has the terminal event and has handed the exchange over for recording (tests)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max_wait)

    # --- the reading side -------------------------------------------------------------------------------------

    def events_after(self, after_seq: int) -> list[Event]:
        """The kept events with seq > after_seq; ResumeRefused when some of them were dropped from the ring."""
        if after_seq + 1 < self._first_seq:
            raise ResumeRefused(
                410,
                f"stream {self.request_id} is too long to resume from seq {after_seq}: "
                f"events before seq {self._first_seq} are no longer kept",
            )
        return self._events[after_seq + 1 - self._first_seq :]

    async def tail(self, after_seq: int = 0) -> AsyncGenerator[Event, None]:
        """Events with seq > after_seq as they arrive, up to and including the terminal one."""
        while True:
            wake = self._wake
            batch = self.events_after(after_seq)
            for event in batch:
                yield event
                after_seq = event["seq"]
            if self.terminal is not None and after_seq >= self.terminal["seq"]:
                return
            if not batch:
                await wake.wait()
