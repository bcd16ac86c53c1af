"""Keeping this worker's in-memory replicas in step with the database: the search index and the semantic cache.

Without a Qdrant server the database is the one copy of both (rag.retrieval.db_backend, rag.semcache.db_index)
and every worker answers from memory. One background task per worker asks, twice a second, whether the live
build moved (a reindex or backfill by any worker or command) or the cache's revision did (an answer cached or an
entry deleted anywhere), and takes the change in: a reindex anywhere is what this worker serves within half a
second of the switch plus the time to load the new build (docs/benchmarks/replica.md), and an answer cached by
another worker is a hit here within a second.

Each check is two small queries on one thread of its own; the loads it triggers run there too, never on the
event loop, and searches keep using the replica they have until the new one is whole. A database outage is
logged once and retried; the replicas keep serving what they hold.

It is `replica_sync_task`, one of the tasks `infra.worker_tasks.WorkerTasksMiddleware` starts around the
ASGI application. `RAG_REPLICA_SYNC` (default true) switches it off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections

from infra.worker_tasks import WorkerTask
from rag.provider import get_runtime

__all__ = ["ReplicaSync", "replica_sync_enabled", "replica_sync_task", "runtime_replicas", "runtime_store"]

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 0.5
_RETRY_DELAY = 5.0

Replicas = tuple[Any, ...]  # what has a `sync()`: the VectorStore, the semantic cache index, the curated answers


async def runtime_store() -> Any:
    """The pipeline runtime's vector store, whatever its kind (building the runtime if needed); None without one."""
    deps = await get_runtime().deps()
    return getattr(deps.retriever, "store", None)


async def runtime_replicas() -> Replicas:
    """The pipeline runtime's store, semantic cache index and curated answers (building the runtime if needed).
    With a Qdrant server, only the curated answers: the server answers the rest itself."""
    deps = await get_runtime().deps()
    curated = getattr(deps, "curated", None)
    if getattr(settings, "QDRANT_URL", ""):
        return (curated,)
    store = getattr(deps.retriever, "store", None)
    cache = getattr(deps, "cache", None)
    return store, getattr(cache, "index", None), curated


class ReplicaSync:
    def __init__(
        self,
        *,
        replicas: Callable[[], Awaitable[Replicas]] = runtime_replicas,
        interval: float = CHECK_INTERVAL,
    ) -> None:
        self.replicas = replicas
        self.interval = interval
        self.checks = 0
        self.failures = 0  # checks the database did not answer
        self.reloads = 0
        self.last_check: float | None = None  # time.monotonic() of the last completed check
        self._failing = False

    async def run(self) -> None:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-replica")
        loop = asyncio.get_running_loop()
        try:
            replicas = await self._targets()
            while True:
                changed = await loop.run_in_executor(executor, self._check, replicas)
                self.reloads += changed
                await asyncio.sleep(self.interval)
        finally:
            executor.submit(connections.close_all)
            executor.shutdown(wait=False)

    async def _targets(self) -> Replicas:
        while True:
            try:
                return await self.replicas()
            except Exception:
                logger.exception("replica sync: the pipeline runtime cannot be built; retrying in %gs", _RETRY_DELAY)
                await asyncio.sleep(_RETRY_DELAY)

    def _check(self, replicas: Replicas) -> int:
        """On the task's thread: sync each replica; how many reloaded. Its connection stays open between checks
        (two small queries twice a second) and is dropped after a failure."""
        changed = 0
        try:
            for replica in replicas:
                sync = getattr(replica, "sync", None)
                if callable(sync) and sync():
                    changed += 1
        except DatabaseError as exc:
            self.failures += 1
            if not self._failing:
                logger.warning("replica sync: the database does not answer (%s); serving what is loaded", exc)
            self._failing = True
            connections.close_all()
            return changed
        if self._failing:
            logger.info("replica sync: the database answers again")
            self._failing = False
        self.checks += 1
        self.last_check = time.monotonic()
        return changed


def replica_sync_enabled() -> bool:
    # With a Qdrant server only the curated answers are kept in step (the server answers its own queries).
    return bool(getattr(settings, "RAG_REPLICA_SYNC", True))


replica_sync_task: WorkerTask[ReplicaSync] = WorkerTask(
    "rag-replica-sync",
    ReplicaSync,
    restart_delay=5.0,
    stop_timeout=5.0,
    enabled=replica_sync_enabled,
)
