"""The LLM's requests per minute, one window per backend, counted in the project's rate windows (infra.ratelimit).

Hosted providers (and gateways in front of vLLM) enforce an RPM quota and answer 429 past it; keeping under the
quota ourselves turns those 429s into a short, bounded wait. Every attempt counts, retries included, because
the upstream counts them too.

Unlike the visitors' limits, which refuse, a call waits for its spot: it books the earliest start that keeps the
window under the limit and sleeps until then (`infra.ratelimit.wait_for_spot`), so callers keep their arrival
order and a caller knows at once whether its wait fits its deadline (fail fast instead of sleeping in vain). The
windows are the process's own, or the cluster's in Redis when the wiring hands them over (`REDIS_URL` with
`LLM_CLUSTER_LIMITS`): then the limit holds for every worker together. The limiter is waited on *before* a
concurrency slot is requested, so a caller throttled here never holds a slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from infra.ratelimit import RateLimiter, RateRule, SlidingWindowRateLimiter, wait_for_spot

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
        windows: RateLimiter | None = None,
    ) -> None:
        if not window > 0:
            raise ValueError(f"window must be > 0 s, got {window}")
        # A callable, not a number: the policy config can be edited live and the next call sees the change.
        self._limit_for = limit_for
        self.window = window
        self._sleep = sleep
        # The cluster's windows when given (Redis: on Redis's clock), else this process's on `clock`.
        self.windows = windows if windows is not None else SlidingWindowRateLimiter(clock=clock)

    def limit(self, backend: str) -> int:
        """The limit the next call on ``backend`` is held to (0 = unlimited)."""
        return self._limit_for(backend)

    async def wait(self, backend: str, max_wait: float) -> float:
        """Wait for a spot and take it; returns the seconds waited.

        Raises RateLimited at once, without waiting, when the spot is more than ``max_wait`` seconds away.
        """
        limit = self._limit_for(backend)
        if limit <= 0:
            return 0.0
        rules = [RateRule(f"llm:{backend}", limit, self.window)]
        booking = await wait_for_spot(self.windows, rules, max_wait=max_wait, sleep=self._sleep)
        if not booking.allowed:
            raise RateLimited(backend, booking.wait, limit, self.window)
        return booking.wait
