"""Redis permits, falling back to this worker's share of each limit while Redis does not answer (a
``PermitSource``).

While Redis answers, every permit is drawn from the cluster's limit (``RedisPermits``). When it stops answering, the
worker serves from its own semaphores (``LocalPermits``) with a share of each limit (limit / live workers, as the
workers' presence in Redis last said), logs a warning, and goes back to Redis when it answers again. Nothing is
counted twice or lost across the switch: the Redis permits still running when Redis went away are counted in the
local share until they end (so the worker stays within it), and the permits of the local share are tracked as
leases of this worker, counted in Redis once it answers again, until they end. Waiters queued in Redis when it went
away wait on in the local share, for what is left of their wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from concurrency.local_permits import LocalGrant, LocalPermits
from concurrency.permits import Occupancy, PermitAsk, PermitsUnreachable
from concurrency.stats import ClusterStats, QueueHeadEntry

from .permits import RedisPermits

__all__ = ["FallbackPermits"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Grant:
    backend: str
    token: str  # the permit's lease in Redis (drawn from it, or tracked there for a permit of the local share)
    local: LocalGrant | None  # its count in the local share: a local permit, or a Redis one running during an outage


class FallbackPermits:
    """See the module docstring. ``state`` is the Redis permits' ("redis", "degraded", "recovering")."""

    def __init__(
        self, redis: RedisPermits, local: LocalPermits, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.redis = redis
        self.local = local
        self._clock = clock
        self._drawn: dict[str, _Grant] = {}  # the Redis permits out here, by token
        redis.listener = self

    @property
    def state(self) -> str:
        return self.redis.state

    @property
    def live_workers(self) -> int:
        return self.redis.live_workers

    # ------------------------------------------------------------------ configuration

    def set_limit(self, backend: str, limit: int) -> None:
        self.redis.set_limit(backend, limit)
        self.local.set_limit(backend, self.redis.share(backend))

    def set_order(self, *, priority: bool, starvation_threshold: float) -> None:
        self.redis.set_order(priority=priority, starvation_threshold=starvation_threshold)
        self.local.set_order(priority=priority, starvation_threshold=starvation_threshold)

    # ------------------------------------------------------------------ taking and giving back

    def try_take(self, backend: str) -> _Grant | None:
        if self.redis.state == "redis":
            return None
        local = self.local.try_take(backend)
        return None if local is None else _Grant(backend, self.redis.track(backend), local)

    async def take(self, backend: str, ask: PermitAsk, wait: float, *, may_queue: bool) -> _Grant | None:
        if self.redis.state == "redis":
            started = self._clock()
            try:
                token = await self.redis.take(backend, ask, wait, may_queue=may_queue)
            except PermitsUnreachable:
                wait = max(0.0, wait - (self._clock() - started))  # the rest of the wait is local
            else:
                if token is None:
                    return None
                grant = self._drawn[token] = _Grant(backend, token, None)
                return grant
        local = await self.local.take(backend, ask, wait, may_queue=may_queue)
        return None if local is None else _Grant(backend, self.redis.track(backend), local)

    def give_back(self, backend: str, grant: _Grant) -> None:
        self._drawn.pop(grant.token, None)
        if grant.local is not None:
            self.local.give_back(backend, grant.local)
        self.redis.give_back(backend, grant.token)

    # ------------------------------------------------------------------ Redis's outages

    def permits_down(self, exc: BaseException) -> None:
        logger.warning(
            "LLM permits: Redis unreachable (%s); this worker now allows its share alone (limit / %d live workers: "
            "%s) until Redis answers",
            exc,
            self.redis.live_workers,
            {name: self.redis.share(name) for name in self.redis.backends},
        )
        for grant in self._drawn.values():
            if grant.local is None:
                # Still running: counted in the share, so this worker stays within it.
                grant.local = self.local.occupy(grant.backend)

    def permits_up(self) -> None:
        logger.warning("LLM permits: Redis answers again; permits are drawn from the cluster's limit again")

    def workers_changed(self) -> None:
        for name in self.redis.backends:
            share = self.redis.share(name)
            if self.local.here(name).limit != share:
                self.local.set_limit(name, share)

    # ------------------------------------------------------------------ reads

    def here(self, backend: str) -> Occupancy:
        remote, local = self.redis.here(backend), self.local.here(backend)
        return Occupancy(remote.in_progress, remote.waiting + local.waiting, remote.limit)

    def occupancy(self, backend: str) -> Occupancy:
        return self.redis.occupancy(backend) if self.redis.state == "redis" else self.local.occupancy(backend)

    def queue_head(self, backend: str, size: int) -> list[QueueHeadEntry]:
        return (self.redis.queue_head(backend, size) + self.local.queue_head(backend, size))[:size]

    def cluster_stats(self) -> ClusterStats:
        return self.redis.cluster_stats()

    async def aclose(self) -> None:
        await self.redis.aclose()
