"""Applying a settings snapshot to this process: the manager first, then the registered callbacks.

Everything that changes the manager runs on the thread of the event loop that serves requests (the manager is
not thread-safe). The change feed's settings handler (concurrency.live.follow) registers that loop here; a save
made in a sync view's thread hands the snapshot over with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from concurrency.manager import get_manager

from .snapshot import SettingsSnapshot

__all__ = [
    "on_settings_applied",
    "settings_apply",
    "settings_apply_soon",
    "settings_current",
    "settings_forget",
]

logger = logging.getLogger(__name__)

SettingsCallback = Callable[[SettingsSnapshot], object]

_lock = threading.Lock()
_current: SettingsSnapshot | None = None
_callbacks: list[SettingsCallback] = []
_loop: asyncio.AbstractEventLoop | None = None


def on_settings_applied(fn: SettingsCallback) -> Callable[[], None]:
    """Call ``fn(snapshot)`` after each change is applied in this process (and at once if one already was).

    For values the manager does not own (rpm, retries, timeouts, sample rate). ``fn`` runs on the event loop's
    thread: it must be quick and must not block. Returns a function that unregisters it.
    """
    with _lock:
        _callbacks.append(fn)
        current = _current
    if current is not None:
        _run_callback(fn, current)

    def unregister() -> None:
        with _lock:
            if fn in _callbacks:
                _callbacks.remove(fn)

    return unregister


def settings_current() -> SettingsSnapshot | None:
    """The snapshot last applied in this process (None before the first one)."""
    return _current


def settings_apply(snapshot: SettingsSnapshot, *, force: bool = False) -> bool:
    """Apply ``snapshot`` now, on the calling thread. Skipped (False) unless it is newer than the applied one
    or ``force`` (the database said the version differs, e.g. after a restore)."""
    global _current
    with _lock:
        current = _current
    if not force and current is not None and snapshot.version <= current.version:
        return False
    try:
        get_manager().configure(**snapshot.manager_options())
    except ValueError:
        # The row is validated before it is saved; this only happens with a hand-edited database.
        logger.exception("LLM concurrency settings v%s refused by the manager; keeping the old ones", snapshot.version)
        return False
    with _lock:
        _current = snapshot
        callbacks = list(_callbacks)
    for fn in callbacks:
        _run_callback(fn, snapshot)
    logger.info(
        "LLM concurrency settings v%s applied: limits=%s mode=%s",
        snapshot.version,
        snapshot.limits,
        "priority" if snapshot.priority_enabled else "fifo",
    )
    return True


def settings_apply_soon(snapshot: SettingsSnapshot) -> None:
    """Apply from any thread: on the serving loop when the settings handler bound one, else right here."""
    loop = _loop
    if loop is None or loop.is_closed() or not loop.is_running():
        settings_apply(snapshot)
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        settings_apply(snapshot)
    else:
        loop.call_soon_threadsafe(settings_apply, snapshot)


def settings_forget() -> None:
    """Forget the applied snapshot and the callbacks (tests)."""
    global _current
    with _lock:
        _current = None
        _callbacks.clear()


def bind_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    """Called by the settings handler: the loop whose thread may touch the manager."""
    global _loop
    _loop = loop


def _run_callback(fn: SettingsCallback, snapshot: SettingsSnapshot) -> None:
    try:
        fn(snapshot)
    except Exception:
        logger.exception("on_settings_applied callback %r failed", fn)
