"""Bounded recent-wait window and the typed shape of ``LLMConcurrencyManager.stats()``."""

from __future__ import annotations

import math
from collections import deque
from typing import NotRequired, TypedDict

__all__ = [
    "BackendStats",
    "ClusterBackendStats",
    "ClusterStats",
    "ManagerStats",
    "QueueHeadEntry",
    "WaitSummary",
    "WaitWindow",
    "percentile",
]


class QueueHeadEntry(TypedDict):
    request_id: str | None
    priority: int
    waited_ms: float
    boosted: bool


class BackendStats(TypedDict):
    limit: int
    available: int
    in_progress: int
    waiting: int
    total_acquired: int
    total_released: int
    total_timeout: int
    total_rejected: int
    wait_samples: int
    wait_ms_p50: float
    wait_ms_p95: float
    wait_ms_p99: float
    max_wait_ms: float
    queue_head: list[QueueHeadEntry]


class ClusterBackendStats(TypedDict):
    limit: int  # the LLM server's capacity, for the whole cluster
    in_progress: int  # permits out in the whole cluster
    waiting: int  # waiters queued in the whole cluster
    by_worker: dict[str, int]  # permits out per worker id
    local_share: int  # what this worker allows alone while Redis is unreachable


class ClusterStats(TypedDict):
    state: str  # "redis" (permits drawn from Redis) or "degraded" (Redis unreachable: a per-worker share)
    live_workers: int
    lease_seconds: float
    refreshed_at: float  # wall clock of the last look at Redis (0.0: never)
    backends: dict[str, ClusterBackendStats]


class ManagerStats(TypedDict):
    mode: str
    starvation_threshold: float
    acquire_timeout: float
    max_waiters: int
    live_requests: int
    # Auxiliary calls (planner, summary...) skipped before they started because no permit came in time, by kind.
    auxiliary_skipped: dict[str, int]
    backends: dict[str, BackendStats]
    # Only with cluster-wide limits (concurrency.cluster): the whole cluster's use, as Redis last said.
    cluster: NotRequired[ClusterStats]


class WaitSummary(TypedDict):
    samples: int
    p50: float
    p90: float
    p95: float
    p99: float
    max: float


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty): always an observed value."""
    if not sorted_values:
        return 0.0
    rank = math.ceil(p / 100.0 * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


class WaitWindow:
    """Permit wait times of the last ``maxlen`` acquisitions, restricted to the last ``horizon`` seconds.

    Both bounds matter: the count bound caps memory under heavy traffic, the age bound keeps a quiet
    backend from reporting a burst from an hour ago. Zero waits (uncontended acquisitions) are recorded
    too, so percentiles describe what callers actually experienced.
    """

    __slots__ = ("_horizon", "samples")

    def __init__(self, maxlen: int = 1000, horizon: float = 60.0) -> None:
        if maxlen < 1:
            raise ValueError(f"wait window size must be >= 1, got {maxlen}")
        if not horizon > 0:
            raise ValueError(f"wait window horizon must be > 0 s, got {horizon}")
        # Public so the manager's fast path can append (now, wait) without a method call.
        self.samples: deque[tuple[float, float]] = deque(maxlen=maxlen)
        self._horizon = horizon

    def record(self, now: float, wait: float) -> None:
        self.samples.append((now, wait))

    def recent(self, now: float) -> list[float]:
        """Wait times (seconds) inside the window, oldest first.

        Read-only (expired samples are simply skipped; maxlen bounds memory), and list() copies the deque
        in one C call, so a reader on another thread never sees it mutate mid-iteration.
        """
        cutoff = now - self._horizon
        return [wait for at, wait in list(self.samples) if at >= cutoff]

    def summary(self, now: float) -> WaitSummary:
        values = sorted(self.recent(now))
        return {
            "samples": len(values),
            "p50": percentile(values, 50),
            "p90": percentile(values, 90),
            "p95": percentile(values, 95),
            "p99": percentile(values, 99),
            "max": values[-1] if values else 0.0,
        }
