"""Who this worker is, what it reports, and where workers meet in Redis.

Each worker (process) publishes ``worker_stats()`` as JSON under ``<prefix>:concurrency:workers:<worker_id>``
with a short TTL and lists itself in the sorted set ``<prefix>:concurrency:workers`` (score = last publish,
wall clock), so a reader in any worker can list the live ones with one ZRANGEBYSCORE and one MGET.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from concurrency.manager import get_manager
from infra.identity import worker_id, worker_started_at
from infra.redis_client import redis_config, redis_sync_client

from .apply import settings_current
from .snapshot import SettingsSnapshot

__all__ = [
    "WORKER_TTL_SECONDS",
    "redis_config",
    "register_stats_provider",
    "worker_id",
    "worker_key",
    "worker_stats",
    "workers_index_key",
    "workers_read",
]

logger = logging.getLogger(__name__)

# A worker that stopped publishing disappears from the console after this many seconds.
WORKER_TTL_SECONDS = 5

StatsProvider = Callable[[], Any]
_providers: dict[str, StatsProvider] = {}
_providers_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------- identity


# ---------------------------------------------------------------------------------------------- stats


def register_stats_provider(name: str, fn: StatsProvider) -> Callable[[], None]:
    """Add ``fn()`` (JSON-serialisable, quick, thread-safe: it is called on the loop and from views) to this
    worker's stats under ``extra[name]``. Registering a name again replaces it. Returns an unregister function."""
    if not name:
        raise ValueError("a stats provider needs a name")
    with _providers_lock:
        _providers[name] = fn

    def unregister() -> None:
        with _providers_lock:
            if _providers.get(name) is fn:
                del _providers[name]

    return unregister


def _extra_stats() -> dict[str, Any]:
    with _providers_lock:
        providers = list(_providers.items())
    extra: dict[str, Any] = {}
    for name, fn in providers:
        try:
            value = fn()
            json.dumps(value)  # a provider returning something odd must not break the whole payload
        except Exception as exc:
            logger.warning("stats provider %r failed: %s", name, exc)
            value = {"error": f"{type(exc).__name__}: {exc}"}
        extra[name] = value
    return extra


def worker_stats(*, queue_head: int = 5) -> dict[str, Any]:
    """This process's entry in the console: identity, applied settings version, manager stats, extras."""
    current: SettingsSnapshot | None = settings_current()
    return {
        "worker_id": worker_id(),
        "started_at": worker_started_at(),
        "updated_at": time.time(),
        "settings_version": None if current is None else current.version,
        "manager": get_manager().stats(queue_head=queue_head),
        "extra": _extra_stats(),
    }


# ---------------------------------------------------------------------------------------------- Redis


def worker_key(prefix: str, wid: str) -> str:
    return f"{prefix}:concurrency:workers:{wid}"


def workers_index_key(prefix: str) -> str:
    return f"{prefix}:concurrency:workers"


def workers_read(*, max_age: float = 30.0) -> list[dict[str, Any]]:
    """Every worker that published lately, by worker id (blocking: call from a thread). [] without Redis or
    when Redis does not answer."""
    url, prefix = redis_config()
    if not url:
        return []
    import redis  # heavy (~150 ms): paid only by a process configured with Redis

    try:
        client = redis_sync_client(url)
        ids = client.zrangebyscore(workers_index_key(prefix), time.time() - max_age, "+inf")
        raw = client.mget([worker_key(prefix, i.decode()) for i in ids]) if ids else []
    except (redis.RedisError, OSError) as exc:
        logger.warning("could not read LLM concurrency worker stats from Redis: %s", exc)
        return []
    workers = []
    for value in raw:
        if value is None:  # expired: that worker stopped publishing
            continue
        try:
            entry = json.loads(value)
        except ValueError:
            continue
        if isinstance(entry, dict) and "worker_id" in entry:
            workers.append(entry)
    return sorted(workers, key=lambda w: str(w["worker_id"]))
