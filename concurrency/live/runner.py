"""The one background task per worker that keeps this process in step with the settings row.

With Redis: subscribed to ``<prefix>:concurrency:settings`` (a committed change arrives in milliseconds), a
database version check every few seconds in case a message was missed, and this worker's stats published
twice a second. Without Redis: a database version check twice a second (another process on the same SQLite
file saves; a save in this process is applied directly by the service).

The task never blocks the loop: database reads run on one dedicated thread, and the loop only looks at their
futures; Redis goes through ``redis.asyncio`` with timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from infra.redis_calls import redis_call
from infra.worker_tasks import WorkerTask

from .apply import bind_loop, settings_apply, settings_current
from .snapshot import SettingsSnapshot
from .workers import (
    WORKER_TTL_SECONDS,
    redis_config,
    settings_channel,
    worker_id,
    worker_key,
    worker_stats,
    workers_index_key,
)

__all__ = [
    "LiveSettingsRunner",
    "live_settings_enabled",
    "live_settings_preload",
    "live_settings_running",
    "live_settings_start",
    "live_settings_stop",
    "live_settings_task",
]

logger = logging.getLogger(__name__)

_TICK = 0.1  # longest the loop below sleeps: bounds how late a poll result or a stats publish is
_REDIS_OP_TIMEOUT = 1.0


def _db_read(known_version: int | None) -> SettingsSnapshot | None:
    """On the runner's thread: the row as a snapshot if its version differs from ``known_version``."""
    # in the function: the models it reads are not ready when this package is first imported
    from concurrency.live.stored import concurrency_settings_snapshot, concurrency_settings_version

    close_old_connections()
    try:
        if known_version is not None and concurrency_settings_version() == known_version:
            return None
        return concurrency_settings_snapshot()
    finally:
        close_old_connections()


def live_settings_preload() -> bool:
    """At server start-up, from sync code, before the first connection starts the runner: apply the stored row,
    so the first requests already run on it (limits, policy, sample rate) rather than on the environment's
    seeds. One query; False (the seeds stay until the runner reads the row) when the database cannot answer yet.
    """
    if settings_current() is not None:
        return False
    try:
        snapshot = _db_read(None)
    except DatabaseError as exc:
        logger.warning("live settings: the settings row is unreadable at start-up (%s); the seeds stay for now", exc)
        return False
    return snapshot is not None and settings_apply(snapshot)


class LiveSettingsRunner:
    def __init__(
        self,
        *,
        redis_url: str = "",
        prefix: str = "helpcentre",
        db_poll_interval: float | None = None,
        stats_interval: float = 0.5,
    ) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        # Without Redis the database poll is the only way news from another process arrives: keep it under 1 s.
        self.db_poll_fast = 0.5 if db_poll_interval is None else db_poll_interval
        self.db_poll_slow = 3.0 if db_poll_interval is None else db_poll_interval
        self.stats_interval = stats_interval
        self.worker_id = worker_id()
        self._client: Any = None
        self._pubsub: Any = None
        self._redis_retry_at = 0.0
        self._redis_failures = 0
        self._db_failures = 0
        self._poll: Future[SettingsSnapshot | None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.applied_from_redis = 0
        self.applied_from_db = 0

    @classmethod
    def from_settings(cls) -> LiveSettingsRunner:
        url, prefix = redis_config()
        return cls(redis_url=url, prefix=prefix)

    # -------------------------------------------------------------------------------------------- main loop

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        bind_loop(loop)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="concurrency-live")
        next_poll = next_stats = loop.time()
        loaded = False
        try:
            while True:
                if self.redis_url and self._pubsub is None and loop.time() >= self._redis_retry_at:
                    await self._redis_connect()
                if self._pubsub is not None:
                    await self._receive(_TICK)
                else:
                    await asyncio.sleep(_TICK)
                now = loop.time()
                loaded = self._collect_poll(loaded)
                if now >= next_poll and self._poll is None:
                    current = settings_current()
                    known = current.version if (loaded and current is not None) else None
                    self._poll = self._executor.submit(_db_read, known)
                    next_poll = now + (self.db_poll_slow if self._pubsub is not None else self.db_poll_fast)
                if self._client is not None and now >= next_stats:
                    next_stats = now + self.stats_interval
                    await self._publish_stats()
        finally:
            bind_loop(None)
            self._executor.shutdown(wait=False, cancel_futures=True)
            await self._redis_close(forget_worker=True)

    def _collect_poll(self, loaded: bool) -> bool:
        """Apply the result of a finished database read; returns whether the row was loaded once."""
        poll = self._poll
        if poll is None or not poll.done():
            return loaded
        self._poll = None
        try:
            snapshot = poll.result()
        except Exception as exc:
            self._db_failures += 1
            if self._db_failures == 1:  # once per streak: a database outage must not flood the log
                logger.warning("reading the LLM concurrency settings row failed (%s); retrying", exc, exc_info=exc)
            return loaded
        if self._db_failures:
            logger.info("LLM concurrency settings row readable again after %d failed reads", self._db_failures)
            self._db_failures = 0
        # The database is the authority: a differing version is applied even if it is lower (restore).
        if snapshot is not None and settings_apply(snapshot, force=True):
            self.applied_from_db += 1
        return True

    # -------------------------------------------------------------------------------------------- Redis

    async def _redis_connect(self) -> None:
        import redis.asyncio as aioredis  # heavy (~150 ms): paid only by a process configured with Redis

        client = aioredis.Redis.from_url(
            self.redis_url, socket_timeout=_REDIS_OP_TIMEOUT, socket_connect_timeout=_REDIS_OP_TIMEOUT
        )
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await redis_call(pubsub.subscribe(settings_channel(self.prefix)), timeout=_REDIS_OP_TIMEOUT * 2)
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            self._redis_failed(exc)
            with contextlib.suppress(Exception):
                await pubsub.aclose()
                await client.aclose()
            return
        if self._redis_failures:
            logger.info("LLM concurrency live settings: Redis is back")
        self._redis_failures = 0
        self._client, self._pubsub = client, pubsub

    def _redis_failed(self, exc: BaseException) -> None:
        self._redis_failures += 1
        delay = min(5.0, 0.5 * 2 ** (self._redis_failures - 1))
        self._redis_retry_at = asyncio.get_running_loop().time() + delay
        if self._redis_failures == 1:
            logger.warning("LLM concurrency live settings: Redis unreachable (%s); polling the database meanwhile", exc)

    async def _receive(self, wait: float) -> None:
        import redis.asyncio as aioredis  # heavy: see _redis_connect

        try:
            message = await redis_call(self._pubsub.get_message(ignore_subscribe_messages=True, timeout=wait))
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            await self._redis_close(forget_worker=False)
            self._redis_failed(exc)
            return
        if message is None or message.get("type") != "message":
            return
        try:
            snapshot = SettingsSnapshot.from_json(message["data"])
        except (ValueError, TypeError) as exc:
            logger.warning("ignoring a malformed LLM concurrency settings message: %s", exc)
            return
        if settings_apply(snapshot):
            self.applied_from_redis += 1

    async def _publish_stats(self) -> None:
        import redis.asyncio as aioredis  # heavy: see _redis_connect

        payload = json.dumps(worker_stats(), separators=(",", ":"), default=str)
        now = time.time()
        index = workers_index_key(self.prefix)
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.set(worker_key(self.prefix, self.worker_id), payload, ex=WORKER_TTL_SECONDS)
            pipe.zadd(index, {self.worker_id: now})
            pipe.zremrangebyscore(index, "-inf", now - 3600)
            await redis_call(pipe.execute(), timeout=_REDIS_OP_TIMEOUT)
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            await self._redis_close(forget_worker=False)
            self._redis_failed(exc)

    async def _redis_close(self, *, forget_worker: bool) -> None:
        client, pubsub = self._client, self._pubsub
        self._client = self._pubsub = None
        if client is None:
            return
        # CancelledError too: this also runs while the task is being cancelled, and cleanup is best effort.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(0.5):
                if forget_worker:
                    await client.delete(worker_key(self.prefix, self.worker_id))
                    await client.zrem(workers_index_key(self.prefix), self.worker_id)
        # Bounded too: closing a pub/sub connection mid-read can otherwise wait for the socket timeout, and a
        # worker (or a test's event loop) shutting down would wait with it.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(0.5):
                await pubsub.aclose()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(0.5):
                await client.aclose()


# ------------------------------------------------------------------------------------------------ lifecycle


def live_settings_enabled() -> bool:
    """``settings.CONCURRENCY_LIVE_SETTINGS`` (default on): tests of other apps that drive the ASGI application
    through communicators may turn the background task off."""
    return bool(getattr(settings, "CONCURRENCY_LIVE_SETTINGS", True))


def _describe(runner: LiveSettingsRunner) -> str:
    return f"{runner.worker_id}, {'Redis pub/sub' if runner.redis_url else 'database poll'}"


# after a crash it restarts after 5 s, so a bug cannot spin
live_settings_task: WorkerTask[LiveSettingsRunner] = WorkerTask(
    "concurrency-live-settings",
    LiveSettingsRunner.from_settings,
    restart_delay=5.0,
    enabled=live_settings_enabled,
    describe=_describe,
)


def live_settings_start(runner: LiveSettingsRunner | None = None) -> asyncio.Task[None] | None:
    """Start this process's live-settings task on the running loop, once; later calls return the same task.

    Call from async code (`WorkerTasksMiddleware` does it on the first connection). Returns None while a crashed
    task waits to be restarted.
    """
    return live_settings_task.start(None if runner is None else lambda: runner)


async def live_settings_stop() -> None:
    """Stop the task (it removes this worker from the console's list) and wait for it."""
    await live_settings_task.stop()


def live_settings_running() -> LiveSettingsRunner | None:
    """The runner of the live task, if one runs."""
    return live_settings_task.running()
