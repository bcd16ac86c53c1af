"""Keeping this worker's in-memory replicas in step with the database: the search index, the semantic cache and the
curated answers.

Without a Qdrant server the database is the one copy of the index and the cache (rag.retrieval.db_backend,
rag.semcache.db_index) and every worker answers from memory; the curated answers are always held in memory. Each
writer publishes its topic on the change feed after its commit (`INDEX_TOPIC`: a build switched or written into;
`CACHE_TOPIC`: an answer cached or an entry deleted; `CURATED_TOPIC`: a curated answer approved, edited or deleted),
and each worker's watcher (infra.changefeed) runs `replica_follow`, which syncs the one replica that topic is
about: a reindex anywhere is what this worker serves once the new build is loaded (docs/benchmarks/replica.md), and
an answer cached by another worker is a hit here within a second.

A sync is one small query when nothing changed; the loads it triggers run on a thread, never on the event loop,
and searches keep using the replica they have until the new one is whole. A database outage fails the handler,
which the change feed logs and runs again; the replicas keep serving what they hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from rag.curated.services import CURATED_TOPIC
from rag.provider import get_runtime
from rag.retrieval.db_backend import INDEX_TOPIC
from rag.semcache.services import CACHE_TOPIC

__all__ = [
    "REPLICA_TOPICS",
    "ReplicaSync",
    "replica_follow",
    "replica_sync_enabled",
    "runtime_replicas",
    "runtime_store",
]

logger = logging.getLogger(__name__)

REPLICA_TOPICS = (INDEX_TOPIC, CACHE_TOPIC, CURATED_TOPIC)
# A reload of a large index takes seconds (docs/benchmarks/replica.md): its handler's bound is generous.
REPLICA_TIMEOUT = 300.0

# topic -> what has a `sync()`: the VectorStore, the semantic cache index, the curated answers
Replicas = dict[str, Any]


async def runtime_store() -> Any:
    """The pipeline runtime's vector store, whatever its kind (building the runtime if needed); None without one."""
    deps = await get_runtime().deps()
    return getattr(deps.retriever, "store", None)


async def runtime_replicas() -> Replicas:
    """The pipeline runtime's store, semantic cache index and curated answers by topic (building the runtime if
    needed). With a Qdrant server, only the curated answers: the server answers the rest itself."""
    deps = await get_runtime().deps()
    curated = getattr(deps, "curated", None)
    if getattr(settings, "QDRANT_URL", ""):
        return {CURATED_TOPIC: curated}
    cache = getattr(deps, "cache", None)
    return {
        INDEX_TOPIC: getattr(deps.retriever, "store", None),
        CACHE_TOPIC: getattr(cache, "index", None),
        CURATED_TOPIC: curated,
    }


def _sync(replica: Any) -> bool:
    """On a thread: take in what changed; True when the replica reloaded."""
    close_old_connections()
    try:
        return bool(replica.sync())
    finally:
        close_old_connections()


class ReplicaSync:
    """This worker's replicas, kept in step: `follow(topic)` is the change feed's handler."""

    def __init__(self, *, replicas: Callable[[], Awaitable[Replicas]] = runtime_replicas) -> None:
        self.replicas = replicas
        self.syncs = 0
        self.reloads = 0

    async def follow(self, topic: str) -> bool:
        """Sync the replica `topic` is about (the database fails it: the change feed runs it again)."""
        replica = (await self.replicas()).get(topic)
        if not callable(getattr(replica, "sync", None)):
            return False
        changed = await asyncio.to_thread(_sync, replica)
        self.syncs += 1
        self.reloads += changed
        return changed


def replica_sync_enabled() -> bool:
    """``settings.RAG_REPLICA_SYNC`` (default true)."""
    return bool(getattr(settings, "RAG_REPLICA_SYNC", True))


_sync_here = ReplicaSync()


async def replica_follow(topic: str) -> None:
    """The change feed's handler for `REPLICA_TOPICS` (registered where the app is assembled)."""
    await _sync_here.follow(topic)
