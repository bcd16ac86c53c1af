"""Per-client request rate limit: an exact sliding window of the last minute, in bounded memory.

Each key keeps the timestamps of its requests within the window (at most `limit_per_minute` of them). Keys
whose window has emptied are evicted on a periodic sweep, and past `max_keys` the least recently seen key goes,
so a scan from many addresses cannot grow memory without bound. One instance per process; calls are cheap and
thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

WINDOW_SECONDS = 60.0


class SlidingWindowRateLimiter:
    def __init__(
        self,
        limit_per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 50_000,
        sweep_every: int = 1024,
    ) -> None:
        if limit_per_minute < 0:
            raise ValueError("limit_per_minute must be >= 0 (0 means unlimited)")
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.limit = limit_per_minute
        self._clock = clock
        self._max_keys = max_keys
        self._sweep_every = max(1, sweep_every)
        self._calls = 0
        # Most recently seen key last, so eviction under pressure takes the longest idle first.
        self._windows: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str) -> tuple[bool, float]:
        """(allowed, retry_after_seconds) for one more request from `key`; an allowed request is counted."""
        if self.limit == 0:
            return True, 0.0
        now = self._clock()
        horizon = now - WINDOW_SECONDS
        with self._lock:
            self._calls += 1
            if self._calls % self._sweep_every == 0:
                self._sweep(horizon)
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = deque()
                while len(self._windows) > self._max_keys:
                    self._windows.popitem(last=False)
            else:
                self._windows.move_to_end(key)
            while window and window[0] <= horizon:
                window.popleft()
            if len(window) >= self.limit:
                return False, max(0.0, window[0] + WINDOW_SECONDS - now)
            window.append(now)
            return True, 0.0

    def _sweep(self, horizon: float) -> None:
        idle = [key for key, window in self._windows.items() if not window or window[-1] <= horizon]
        for key in idle:
            del self._windows[key]

    def __len__(self) -> int:
        """Keys currently tracked (for tests and stats)."""
        with self._lock:
            return len(self._windows)

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()
            self._calls = 0
