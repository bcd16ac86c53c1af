"""Stopping a worker without cutting an answer: on SIGTERM it drains, then the server stops.

The drain (`drain()`), in order:
1. `chatbot.lifecycle` says draining: readiness turns false, new asks are refused in a way a proxy retries
   elsewhere (SSE: 503 + Retry-After; WebSocket: a terminal `error` `unavailable` with `retry_after`, then close
   1012 "service restart"; a new socket is closed 1012 at once).
2. The answers already running (and the transports sending them) get up to `SHUTDOWN_DRAIN_SECONDS` to finish;
   the drain ends as soon as none is left.
3. Whatever still runs when the window closes is stopped with the terminal `error` `unavailable` (with
   `retry_after`), which the transports send like any terminal event; the exchange is recorded as failed. A
   transport that still has not ended (a resume reading another worker's stream from Redis) gets its own
   terminal `unavailable`.
4. Open WebSockets are closed with 1012, the exchange writes still in flight are waited for, and only then does
   the server stop.

Under daphne the server's own SIGTERM handling (Twisted's reactor: `reactor.stop()`, whose "before shutdown"
trigger cancels every application at once) would cut every stream. `install_under_daphne` replaces the reactor's
SIGTERM and SIGINT handlers once it runs, so a signal starts the drain and the reactor is stopped when the drain
is over. A second signal during the drain closes the window at once (the answers still end with `unavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from chatbot import lifecycle
from chatbot.recording import exchange_recorder
from chatbot.replay import stream_registry
from chatbot.streaming import pending_records, transport_error_event
from rag.events import Event

logger = logging.getLogger(__name__)

UNAVAILABLE = "unavailable"
WS_SERVICE_RESTART = 4012  # 1012 "service restart" in the private range: daphne (autobahn) sends no 1012
REFUSED_MESSAGE = "this server is shutting down; ask again, another server will answer"
INTERRUPTED_MESSAGE = "this server shut down before the answer was finished; ask again"
# After the window: how long the answers stopped with `unavailable` get to send their terminal event, then how
# long the transports still running get once cancelled, then the exchange writes. Together they stay within 2 s.
INTERRUPT_GRACE_SECONDS = 1.0
CANCEL_GRACE_SECONDS = 0.3
CLOSE_TIMEOUT_SECONDS = 0.2
RECORDS_GRACE_SECONDS = 0.4
RECHECK_SECONDS = 0.5


class Closable(Protocol):
    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None: ...


@dataclass
class _State:
    window_closed: bool = False
    hurry: asyncio.Event | None = None
    task: asyncio.Task[DrainReport] | None = None


_state = _State()
_transports: set[asyncio.Task[Any]] = set()
_sockets: weakref.WeakSet[Any] = weakref.WeakSet()


@dataclass(frozen=True, slots=True)
class DrainReport:
    seconds: float
    finished: int  # answers running at the start that ended on their own within the window
    interrupted: int  # answers stopped with `unavailable` when the window closed
    cancelled: int  # transports that still ran after that and were cancelled


# --- what the transports call --------------------------------------------------------------------------------


def window_closed() -> bool:
    """Whether the drain window is over: what still runs is being ended with `unavailable`."""
    return _state.window_closed


def unavailable_event(*, request_id: str | None = None, after_seq: int = 0) -> Event:
    """The terminal `error` `unavailable` (with `retry_after`) of a refused ask or an interrupted stream."""
    message = INTERRUPTED_MESSAGE if after_seq else REFUSED_MESSAGE
    event = transport_error_event(UNAVAILABLE, message, request_id=request_id, after_seq=after_seq)
    event["retry_after"] = lifecycle.retry_after_seconds()
    return event


def interrupt_payload() -> dict[str, Any]:
    return {"retry_after": lifecycle.retry_after_seconds()}


def transport_started() -> None:
    """The current task sends an answer's stream to a client: the drain waits for it (and ends it, at worst)."""
    task = asyncio.current_task()
    if task is not None and not task.done():
        _transports.add(task)
        task.add_done_callback(_transports.discard)


def socket_opened(socket: Closable) -> None:
    """A WebSocket to close with 1012 when the drain is over."""
    _sockets.add(socket)


def socket_closed(socket: Closable) -> None:
    _sockets.discard(socket)


# --- the drain -----------------------------------------------------------------------------------------------


def _busy() -> bool:
    return any(not task.done() for task in _transports) or bool(stream_registry().running())


async def _while_busy(
    seconds: float, hurry: asyncio.Event | None = None, *, clock: Callable[[], float] = time.monotonic
) -> None:
    """Return when no transport or answer of this worker runs, `seconds` passed by `clock`, or `hurry` was set."""
    deadline = clock() + seconds
    while _busy() and not (hurry is not None and hurry.is_set()):
        left = deadline - clock()
        if left <= 0:
            return
        ended = [asyncio.ensure_future(stream.ended()) for stream in stream_registry().running()]
        hurried = [asyncio.ensure_future(hurry.wait())] if hurry is not None else []
        waiting = [task for task in _transports if not task.done()] + ended + hurried
        try:
            # Woken by any of them; the set is looked at again at least every RECHECK_SECONDS.
            await asyncio.wait(waiting, timeout=min(left, RECHECK_SECONDS), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in ended + hurried:
                future.cancel()


async def drain(window_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> DrainReport:
    """Drain this worker (see the module's docstring); returns once nothing it served is left running. The window
    and the report's seconds are measured by `clock` (tests pass one they move)."""
    started = clock()
    lifecycle.start_drain(window_seconds)
    hurry = _state.hurry = _state.hurry or asyncio.Event()
    live_at_start = len(stream_registry().running())
    logger.warning(
        "draining: %d answers running, new asks refused, up to %.1f s for them to finish", live_at_start, window_seconds
    )
    await _while_busy(window_seconds, hurry, clock=clock)

    _state.window_closed = True
    running = stream_registry().running()
    for stream in running:
        stream.interrupt(UNAVAILABLE, INTERRUPTED_MESSAGE, **interrupt_payload())
    await _while_busy(INTERRUPT_GRACE_SECONDS, clock=clock)

    leftover = [task for task in _transports if not task.done()]
    for task in leftover:
        task.cancel()  # each sends its own terminal `unavailable` (it checks `window_closed()`)
    if leftover:
        await asyncio.wait(leftover, timeout=CANCEL_GRACE_SECONDS)

    await asyncio.gather(*(_close(socket) for socket in list(_sockets)))
    await pending_records(max_wait=RECORDS_GRACE_SECONDS)
    await exchange_recorder().aclose()  # the recording thread's kept connection

    report = DrainReport(
        seconds=clock() - started,
        finished=max(0, live_at_start - len(running)),
        interrupted=len(running),
        cancelled=len(leftover),
    )
    logger.warning(
        "drained in %.1f s: %d answers ended on their own, %d ended with 'unavailable', %d transports cancelled",
        report.seconds,
        report.finished,
        report.interrupted,
        report.cancelled,
    )
    return report


async def _close(socket: Closable) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(socket.close(code=WS_SERVICE_RESTART), CLOSE_TIMEOUT_SECONDS)


def hurry() -> None:
    """Close the drain window now (a second signal)."""
    if _state.hurry is not None:
        _state.hurry.set()


def reset_for_tests() -> None:
    global _state
    _state = _State()
    _transports.clear()
    _sockets.clear()
    lifecycle.reset_for_tests()


# --- daphne ----------------------------------------------------------------------------------------------------


def install_under_daphne(window_seconds: float) -> bool:
    """Under daphne, make SIGTERM and SIGINT drain before the reactor stops. False when not under daphne."""
    reactor = sys.modules.get("twisted.internet.reactor")  # never imported here: that would install one
    if reactor is None or "daphne.server" not in sys.modules:
        return False
    # Once running: Twisted installs its own handlers as it starts ("during startup"), these replace them.
    reactor.callWhenRunning(_take_signals, reactor, window_seconds)
    # Once stopped, nothing is left to clean up but memory: the interpreter's last garbage collection over
    # the whole heap (the index replica, the models) took 1.5 s of a stop. Frozen objects are left to the OS.
    reactor.addSystemEventTrigger("after", "shutdown", gc.freeze)
    return True


def _take_signals(reactor: Any, window_seconds: float) -> None:
    def on_signal(number: int, frame: FrameType | None) -> None:
        # Python runs this on the main thread between two steps of the loop; the loop is told to act on it.
        reactor.callFromThread(_on_stop_signal, reactor, number, window_seconds)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _on_stop_signal(reactor: Any, number: int, window_seconds: float) -> None:
    name = signal.Signals(number).name
    if _state.task is not None:
        logger.warning("%s during the drain: ending the answers still running now", name)
        hurry()
        return
    logger.warning("%s received: draining before the server stops", name)
    _state.hurry = asyncio.Event()
    task = asyncio.ensure_future(drain(window_seconds))
    _state.task = task

    def stop(done: asyncio.Task[DrainReport]) -> None:
        if not done.cancelled() and done.exception() is not None:
            logger.error("the drain failed: %r", done.exception())
        if reactor.running:
            reactor.stop()

    task.add_done_callback(stop)
