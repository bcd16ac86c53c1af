"""Where this deployment's Redis is and under which key prefix, and the process's blocking client of it.

`redis_config()` is the one reading of `REDIS_URL` and the key prefix: every Redis key of a deployment (streams,
settings, workers, limits, the change feed) shares one prefix, so one Redis can serve several deployments.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

__all__ = ["redis_config", "redis_sync_client"]

_TIMEOUT = 1.0
_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def redis_config() -> tuple[str, str]:
    """(REDIS_URL, key prefix); the URL is empty when Redis is not configured. The prefix is REDIS_PREFIX, else the
    channel layer's, so every Redis key of a deployment (streams, settings, workers, limits) shares one and one Redis
    can serve several deployments."""
    prefix = getattr(settings, "REDIS_PREFIX", "") or ""
    if not prefix:
        layer = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {})
        prefix = layer.get("CONFIG", {}).get("prefix", "") or "helpcentre"
    return getattr(settings, "REDIS_URL", "") or "", prefix


def redis_sync_client(url: str) -> Any:
    """The process's blocking client of the Redis at `url` (one per URL, thread-safe; 1 s socket timeouts)."""
    import redis  # heavy (~150 ms): paid only by a process configured with Redis

    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = redis.Redis.from_url(
                url, socket_timeout=_TIMEOUT, socket_connect_timeout=_TIMEOUT, health_check_interval=30
            )
            _clients[url] = client
        return client
