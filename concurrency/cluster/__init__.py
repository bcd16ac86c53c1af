"""Cluster-wide LLM limits through Redis: the Redis permit source (``permits``), its fallback to a local share
(``fallback``), the scripts and the connection behind them.

``cluster_manager(...)`` builds an ``LLMConcurrencyManager`` whose limits are the cluster's; ``cluster_manager_install
(...)`` makes one the process manager (``concurrency.manager.get_manager``), keeping the settings the current one
runs with; the composition root calls it when ``REDIS_URL`` is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from concurrency.local_permits import LocalPermits
from concurrency.manager import LLMConcurrencyManager, get_manager, set_manager

from .fallback import FallbackPermits
from .permits import RedisPermits

__all__ = ["FallbackPermits", "RedisPermits", "cluster_manager", "cluster_manager_install"]


def cluster_manager(
    limits: Mapping[str, int],
    *,
    redis_url: str,
    prefix: str,
    worker_id: str,
    workers_index_key: str = "",
    lease_seconds: float = 5.0,
    refresh_interval: float = 1.0,
    op_timeout: float = 2.0,
    workers_max_age: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    **options: Any,
) -> LLMConcurrencyManager:
    """A manager drawing its permits from Redis (``limits`` are for the whole cluster), falling back to this
    worker's share while Redis does not answer. ``options``: the manager's (priority, timeouts, waiters)."""
    redis = RedisPermits(
        redis_url=redis_url,
        prefix=prefix,
        worker_id=worker_id,
        workers_index_key=workers_index_key,
        lease_seconds=lease_seconds,
        refresh_interval=refresh_interval,
        op_timeout=op_timeout,
        workers_max_age=workers_max_age,
        clock=clock,
    )
    source = FallbackPermits(redis, LocalPermits(clock=clock), clock=clock)
    return LLMConcurrencyManager(limits, clock=clock, source=source, **options)


def cluster_manager_install(*, redis_url: str, prefix: str, worker_id: str, **options: Any) -> LLMConcurrencyManager:
    """The process manager, drawing from the cluster's limits on ``redis_url`` (once: later calls return the
    installed one)."""
    current = get_manager()
    if isinstance(current.source, FallbackPermits):
        return current
    manager = cluster_manager(
        {name: current.limit(name) for name in current.backends},
        redis_url=redis_url,
        prefix=prefix,
        worker_id=worker_id,
        priority_enabled=current.priority_enabled,
        starvation_threshold=current.starvation_threshold,
        acquire_timeout=current.acquire_timeout,
        max_waiters=current.max_waiters,
        **options,
    )
    set_manager(manager)
    return manager
