"""Sliding-window requests-per-minute limiter for upstream LLM calls, one window per backend.

Hosted providers (and gateways in front of vLLM) enforce an RPM quota and answer 429 past it; keeping under the
quota ourselves turns those 429s into a short, bounded wait. Every attempt counts, retries included, because
the upstream counts them too.

Reservation log rather than "sleep and re-check": a caller that must wait books the earliest start time that
keeps the window under the limit and sleeps until then. That keeps callers in arrival order, lets a caller know
at once whether its wait fits its deadline (fail fast instead of sleeping in vain), and needs no wake-up
coordination between waiters. The limiter is waited on *before* a concurrency slot is requested, so a caller
throttled here never holds a slot.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Awaitable, Callable

__all__ = ["RateLimited", "SlidingWindowRPM"]


class RateLimited(Exception):
    """The next free start time is further away than the caller can wait."""

    def __init__(self, backend: str, retry_after: float, limit: int, window: float) -> None:
        super().__init__(
            f"LLM backend {backend!r} is at its limit of {limit} requests per {window:g} s; "
            f"next free spot in {retry_after:.1f} s"
        )
        self.backend = backend
        self.retry_after = retry_after


class SlidingWindowRPM:
    """At most ``limit_for(backend)`` request starts in any ``window`` seconds (half-open: (t - window, t])."""

    def __init__(
        self,
        limit_for: Callable[[str], int],
        *,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not window > 0:
            raise ValueError(f"window must be > 0 s, got {window}")
        # A callable, not a number: the policy config can be edited live and the next call sees the change.
        self._limit_for = limit_for
        self.window = window
        self._clock = clock
        self._sleep = sleep
        # Per backend: granted and reserved start times, sorted. Bounded by the limit (older ones are pruned).
        self._starts: dict[str, list[float]] = {}

    def _pruned(self, backend: str, now: float) -> list[float]:
        starts = self._starts.setdefault(backend, [])
        cutoff = now - self.window
        drop = bisect.bisect_right(starts, cutoff)
        if drop:
            del starts[:drop]
        return starts

    def next_start(self, backend: str) -> float:
        """Seconds until a request on ``backend`` could start (0.0 = now)."""
        limit = self._limit_for(backend)
        if limit <= 0:
            return 0.0
        now = self._clock()
        starts = self._pruned(backend, now)
        if len(starts) < limit:
            return 0.0
        return max(0.0, starts[-limit] + self.window - now)

    async def wait(self, backend: str, max_wait: float) -> float:
        """Wait for a spot and take it; returns the seconds waited.

        Raises RateLimited at once, without waiting, when the spot is more than ``max_wait`` seconds away.
        """
        limit = self._limit_for(backend)
        if limit <= 0:
            return 0.0
        now = self._clock()
        starts = self._pruned(backend, now)
        # With `limit` starts already inside the window, the new one must come a full window after the
        # limit-th most recent; reservations are included, so concurrent waiters queue behind each other.
        start = now if len(starts) < limit else max(now, starts[-limit] + self.window)
        delay = start - now
        if delay > max_wait:
            raise RateLimited(backend, delay, limit, self.window)
        bisect.insort(starts, start)
        if delay > 0:
            try:
                await self._sleep(delay)
            except BaseException:
                # A cancelled caller gives its spot back. Removing a reservation can only make later ones
                # conservative (they were booked behind it), never push the window over the limit.
                index = bisect.bisect_left(starts, start)
                if index < len(starts) and starts[index] == start:
                    del starts[index]
                raise
        return delay
