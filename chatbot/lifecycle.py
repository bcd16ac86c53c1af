"""Where this worker is in its life: serving, or draining before it stops.

A worker told to stop (SIGTERM) drains: it refuses new answers, says it is not ready (so a proxy or an
orchestrator sends new traffic elsewhere), and gives the answers it is streaming a window to finish. This module
holds that state. It has no Django and no event loop of its own, so a readiness check, a consumer and a signal
handler can all ask it.

- `is_draining()`: true from the moment the drain starts, until the process ends.
- `start_drain(window_seconds)`: start it (idempotent; the first call sets the deadline).
- `seconds_left()`: how much of the window remains (0 once it is over, None when not draining).
- `retry_after_seconds()`: what a refusal tells the client to wait before asking again (elsewhere).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

# A refused client asks again after this long; by then the proxy has seen this worker is not ready.
RETRY_AFTER_SECONDS = 1

_lock = threading.Lock()
_deadline: float | None = None  # time.monotonic() at which the drain window closes, None while serving
_listeners: list[Callable[[], None]] = []


def is_draining() -> bool:
    """Whether this worker has started to drain (it then accepts no new answer and is not ready)."""
    return _deadline is not None


def start_drain(window_seconds: float) -> bool:
    """Start draining with a window of `window_seconds`. Returns False if a drain had already started."""
    global _deadline
    with _lock:
        if _deadline is not None:
            return False
        _deadline = time.monotonic() + max(0.0, window_seconds)
        listeners = list(_listeners)
    for listener in listeners:
        listener()
    return True


def seconds_left() -> float | None:
    """Seconds until the drain window closes (0 once closed); None when not draining."""
    deadline = _deadline
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def retry_after_seconds() -> int:
    """The `retry_after` (and HTTP Retry-After) a refusal or an interrupted answer carries."""
    return max(1, math.ceil(RETRY_AFTER_SECONDS))


def on_drain(listener: Callable[[], None]) -> None:
    """Call `listener()` (from the thread that starts the drain) when it starts; at once if it already has."""
    with _lock:
        started = _deadline is not None
        if not started:
            _listeners.append(listener)
    if started:
        listener()


def reset_for_tests() -> None:
    """Back to serving, with no listener (tests only: a real worker never leaves a drain)."""
    global _deadline
    with _lock:
        _deadline = None
        _listeners.clear()
