"""Cluster-wide LLM limits through Redis: the Redis permit source (``permits``), its fallback to a local share
(``fallback``), the scripts and the connection behind them.

``cluster_manager(limits, RedisPermits(...))`` builds an ``LLMConcurrencyManager`` whose limits are the cluster's;
``cluster_manager_install(RedisPermits(...))`` makes one the process manager (``concurrency.manager.get_manager``),
keeping the settings the current one runs with; the composition root calls it when ``REDIS_URL`` is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from concurrency.local_permits import LocalPermits
from concurrency.manager import LLMConcurrencyManager, get_manager, set_manager

from .fallback import FallbackPermits
from .permits import RedisPermits

__all__ = ["FallbackPermits", "RedisPermits", "cluster_manager", "cluster_manager_install"]


def cluster_manager(limits: Mapping[str, int], redis: RedisPermits, **options: Any) -> LLMConcurrencyManager:
    """A manager drawing its permits from ``redis`` (``limits`` are for the whole cluster), falling back to this
    worker's share while Redis does not answer, on the clock ``redis`` keeps. ``options``: the manager's
    (priority, timeouts, waiters)."""
    source = FallbackPermits(redis, LocalPermits(clock=redis.clock), clock=redis.clock)
    return LLMConcurrencyManager(limits, clock=redis.clock, source=source, **options)


def cluster_manager_install(redis: RedisPermits) -> LLMConcurrencyManager:
    """The process manager, drawing from the cluster's limits through ``redis`` (once: later calls return the
    installed one), with the settings the current one runs with."""
    current = get_manager()
    if isinstance(current.source, FallbackPermits):
        return current
    manager = cluster_manager(
        {name: current.limit(name) for name in current.backends},
        redis,
        priority_enabled=current.priority_enabled,
        starvation_threshold=current.starvation_threshold,
        acquire_timeout=current.acquire_timeout,
        max_waiters=current.max_waiters,
    )
    set_manager(manager)
    return manager
