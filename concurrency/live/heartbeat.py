"""This worker's stats in Redis, for the console: published twice a second, removed when the worker stops.

Not a way of learning about changes (the settings follow the change feed, concurrency.live.follow): a heartbeat
that lets any worker list the live ones. It runs only with Redis; without it the console shows this worker alone.
Redis goes through ``redis.asyncio`` with timeouts; a Redis outage is logged once and retried with a backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from infra.redis_calls import redis_call
from infra.redis_client import redis_config
from infra.worker_tasks import WorkerTask

from .follow import live_settings_enabled
from .workers import WORKER_TTL_SECONDS, worker_id, worker_key, worker_stats, workers_index_key

__all__ = [
    "StatsHeartbeat",
    "worker_stats_enabled",
    "worker_stats_running",
    "worker_stats_start",
    "worker_stats_stop",
    "worker_stats_task",
]

logger = logging.getLogger(__name__)

_REDIS_OP_TIMEOUT = 1.0


class StatsHeartbeat:
    def __init__(self, *, redis_url: str, prefix: str = "helpcentre", interval: float = 0.5) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.interval = interval
        self.worker_id = worker_id()
        self.published = 0
        self._failures = 0

    @classmethod
    def from_settings(cls) -> StatsHeartbeat:
        url, prefix = redis_config()
        return cls(redis_url=url, prefix=prefix)

    async def run(self) -> None:
        import redis.asyncio as aioredis  # heavy (~150 ms): paid only by a process configured with Redis

        client = aioredis.Redis.from_url(
            self.redis_url, socket_timeout=_REDIS_OP_TIMEOUT, socket_connect_timeout=_REDIS_OP_TIMEOUT
        )
        try:
            while True:
                delay = self.interval
                try:
                    await self._publish(client)
                    if self._failures:
                        logger.info("worker stats: Redis is back")
                    self._failures = 0
                except (OSError, TimeoutError, aioredis.RedisError) as exc:
                    self._failures += 1
                    if self._failures == 1:
                        logger.warning("worker stats: Redis unreachable (%s); retrying", exc)
                    delay = min(5.0, self.interval * 2**self._failures)
                await asyncio.sleep(delay)
        finally:
            await self._forget(client)

    async def _publish(self, client: Any) -> None:
        payload = json.dumps(worker_stats(), separators=(",", ":"), default=str)
        now = time.time()
        index = workers_index_key(self.prefix)
        pipe = client.pipeline(transaction=False)
        pipe.set(worker_key(self.prefix, self.worker_id), payload, ex=WORKER_TTL_SECONDS)
        pipe.zadd(index, {self.worker_id: now})
        pipe.zremrangebyscore(index, "-inf", now - 3600)
        await redis_call(pipe.execute(), timeout=_REDIS_OP_TIMEOUT)
        self.published += 1

    async def _forget(self, client: Any) -> None:
        # CancelledError too: this runs while the task is being cancelled, and cleanup is best effort.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(0.5):
                await client.delete(worker_key(self.prefix, self.worker_id))
                await client.zrem(workers_index_key(self.prefix), self.worker_id)
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(0.5):
                await client.aclose()


def worker_stats_enabled() -> bool:
    """With Redis, unless ``CONCURRENCY_LIVE_SETTINGS`` is off."""
    return live_settings_enabled() and bool(redis_config()[0])


# after a crash it restarts after 5 s, so a bug cannot spin
worker_stats_task: WorkerTask[StatsHeartbeat] = WorkerTask(
    "concurrency-worker-stats",
    StatsHeartbeat.from_settings,
    restart_delay=5.0,
    enabled=worker_stats_enabled,
    describe=lambda heartbeat: heartbeat.worker_id,
)


def worker_stats_start(heartbeat: StatsHeartbeat | None = None) -> asyncio.Task[None] | None:
    """Start this process's heartbeat on the running loop, once; later calls return the same task."""
    return worker_stats_task.start(None if heartbeat is None else lambda: heartbeat)


async def worker_stats_stop() -> None:
    """Stop the heartbeat (it removes this worker from the console's list) and wait for it."""
    await worker_stats_task.stop()


def worker_stats_running() -> StatsHeartbeat | None:
    return worker_stats_task.running()
