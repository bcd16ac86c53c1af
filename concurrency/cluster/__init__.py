"""Cluster-wide LLM limits through Redis (see ``concurrency.cluster.manager``).

``cluster_manager_install(...)`` makes a ``ClusterManager`` the process manager (``concurrency.manager.get_manager``),
keeping the settings the current one runs with; the composition root calls it when ``REDIS_URL`` is set.
"""

from __future__ import annotations

from typing import Any

from concurrency.manager import get_manager, set_manager

from .manager import ClusterManager, ClusterPermit

__all__ = ["ClusterManager", "ClusterPermit", "cluster_manager_install"]


def cluster_manager_install(*, redis_url: str, prefix: str, worker_id: str, **options: Any) -> ClusterManager:
    """The process manager as a ClusterManager on ``redis_url`` (once: later calls return the installed one)."""
    current = get_manager()
    if isinstance(current, ClusterManager):
        return current
    manager = ClusterManager(
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
