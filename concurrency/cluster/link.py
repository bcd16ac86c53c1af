"""One worker's connection to the cluster's permits in Redis: the scripts, and the channel that announces grants.

A `RedisLink` belongs to one event loop (``redis.asyncio`` connections cannot move between loops). Every call is
bounded: the client has socket timeouts longer than any blocking read it makes, and callers wrap each operation in
``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from infra.redis_calls import redis_call

from .scripts import ACQUIRE, ADOPT, REFRESH, RELEASE

__all__ = ["REDIS_ERRORS", "RedisLink", "Refreshed"]

logger = logging.getLogger(__name__)

# What an unreachable or failing Redis raises through redis.asyncio (and asyncio.timeout around it).
REDIS_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)

_LISTEN_WAIT = 0.5  # longest blocking read on the grant channel; the socket timeout is longer


@dataclass(frozen=True, slots=True)
class Refreshed:
    granted: list[str]  # waiters of this worker that hold a permit now
    lost_holders: list[str]  # permits of this worker whose lease Redis no longer has
    lost_waiters: list[str]  # waiters of this worker Redis no longer has
    holders: list[str]  # every permit out in the cluster
    queued: int  # waiters in the cluster


class RedisLink:
    def __init__(self, url: str, *, prefix: str, worker_id: str, op_timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.prefix = prefix
        self.worker_id = worker_id
        self.op_timeout = op_timeout
        self.grant_channel_prefix = f"{prefix}:llm:grants:"
        self.client = aioredis.Redis.from_url(
            url,
            socket_timeout=max(2 * op_timeout, _LISTEN_WAIT * 4),
            socket_connect_timeout=op_timeout,
            health_check_interval=30,
        )
        self._acquire = self.client.register_script(ACQUIRE)
        self._release = self.client.register_script(RELEASE)
        self._refresh = self.client.register_script(REFRESH)
        self._adopt = self.client.register_script(ADOPT)

    def keys(self, backend: str) -> list[str]:
        base = f"{self.prefix}:llm:{backend}"
        return [f"{base}:holders", f"{base}:queue", f"{base}:qtime", f"{base}:wlease", f"{base}:low"]

    def script_args(self, limit: int, lease_ms: int, threshold_ms: int, priority: bool) -> list[Any]:
        """The arguments every script starts with (its ``ARGV[1..5]``)."""
        return [limit, lease_ms, threshold_ms, 1 if priority else 0, self.grant_channel_prefix]

    async def acquire(
        self, backend: str, token: str, score: int, common: Sequence[Any], *, may_queue: bool
    ) -> tuple[bool, float]:
        """(granted at once, Redis's clock in ms). Not granted: queued (or, when not ``may_queue``, nothing)."""
        async with asyncio.timeout(self.op_timeout):
            result = await self._acquire(keys=self.keys(backend), args=[*common, token, score, int(may_queue)])
        return bool(int(result[0])), float(result[1])

    async def release(self, backend: str, token: str, common: Sequence[Any]) -> bool:
        """Give a permit back, or leave the queue; True when the token held a permit."""
        async with asyncio.timeout(self.op_timeout):
            return bool(int(await self._release(keys=self.keys(backend), args=[*common, token])))

    async def refresh(
        self, backend: str, holders: Sequence[str], waiters: Sequence[str], common: Sequence[Any]
    ) -> Refreshed:
        """Renew the leases Redis still has; what it granted, what it lost, and the cluster's use."""
        async with asyncio.timeout(self.op_timeout):
            result = await self._refresh(keys=self.keys(backend), args=[*common, len(holders), *holders, *waiters])
        granted, lost_holders, lost_waiters, all_holders, queued = result
        return Refreshed(
            granted=[_text(t) for t in granted],
            lost_holders=[_text(t) for t in lost_holders],
            lost_waiters=[_text(t) for t in lost_waiters],
            holders=[_text(t) for t in all_holders],
            queued=int(queued),
        )

    async def adopt(
        self,
        backend: str,
        holders: Sequence[str],
        waiters: Sequence[tuple[str, int, float]],
        common: Sequence[Any],
    ) -> None:
        """Count again permits still running here and queue again waiters still waiting here that Redis lost."""
        args: list[Any] = [*common, len(holders), *holders]
        for token, score, enqueued_ms in waiters:
            args += [token, score, repr(enqueued_ms)]
        async with asyncio.timeout(self.op_timeout):
            await self._adopt(keys=self.keys(backend), args=args)

    async def live_workers(self, index_key: str, since: float) -> int:
        """Workers whose presence (concurrency.live) was published since ``since`` (wall clock)."""
        async with asyncio.timeout(self.op_timeout):
            return int(await self.client.zcount(index_key, since, "+inf"))

    async def ping(self) -> None:
        async with asyncio.timeout(self.op_timeout):
            await self.client.ping()

    async def listen(self, on_grant: Callable[[str], None], on_error: Callable[[BaseException], None]) -> None:
        """Forever: call ``on_grant(token)`` for each permit Redis hands to one of this worker's waiters. A broken
        connection is reported and retried; grants missed meanwhile are found by the next lease refresh."""
        channel = self.grant_channel_prefix + self.worker_id
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await redis_call(pubsub.subscribe(channel), timeout=self.op_timeout)
                while True:
                    message = await redis_call(pubsub.get_message(ignore_subscribe_messages=True, timeout=_LISTEN_WAIT))
                    if message is not None and message.get("type") == "message":
                        on_grant(_text(message["data"]))
            except REDIS_ERRORS as exc:
                on_error(exc)
            finally:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    async with asyncio.timeout(0.5):
                        await pubsub.aclose()
            await asyncio.sleep(0.5)

    async def close(self) -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(0.5):
                await self.client.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
