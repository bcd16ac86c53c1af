"""One LLM capacity for the whole cluster: every worker draws its permits from Redis.

``ClusterManager`` is an ``LLMConcurrencyManager`` whose limits are the LLM server's capacity for all workers
together. A permit is a lease in Redis (``concurrency.cluster.scripts``), renewed every ``refresh_interval`` by the
worker that holds it, so a worker that dies gives its permits back when their leases run out (``lease_seconds``).
Waiters queue in Redis, in FIFO or priority order with the starvation boost, whichever worker they are on; a
permit given back is handed to the next waiter inside the same script and announced to its worker at once.

When Redis does not answer, the worker falls back to the inherited per-process semaphores with a share of each
limit (limit / live workers, as the workers' presence in Redis last said), logs a warning, and goes back to Redis
when it answers again; permits taken meanwhile are then counted in Redis until they end.

Pure asyncio and redis.asyncio: nothing here imports Django, chat or the pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from concurrency.context import _current
from concurrency.errors import BusyError
from concurrency.manager import LOW_PRIORITY, LLMConcurrencyManager, LLMPermit, _check_limit
from concurrency.stats import ClusterBackendStats, ClusterStats, ManagerStats, QueueHeadEntry
from infra.redis_calls import redis_call

from .link import REDIS_ERRORS, RedisLink

__all__ = ["ClusterManager", "ClusterPermit"]

logger = logging.getLogger(__name__)

# Score of a waiter in the priority queue: priority first, then the request's arrival (ms since the epoch, which
# stays below this factor until the year 2286). Both fit a double exactly.
_PRIORITY_FACTOR = 10_000_000_000_000


@dataclass(slots=True)
class _RemoteWaiter:
    fut: asyncio.Future[bool]
    backend: str
    token: str
    score: int
    priority: int
    request_id: str | None
    started: float
    enqueued_ms: float = 0.0


@dataclass(slots=True)
class _Counts:
    acquired: int = 0
    released: int = 0
    timeout: int = 0
    rejected: int = 0


@dataclass(slots=True)
class _View:
    """The cluster as the last lease refresh saw it."""

    in_progress: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    by_worker: dict[str, dict[str, int]] = field(default_factory=dict)
    refreshed_at: float = 0.0


class ClusterPermit(LLMPermit):
    """``async with manager.acquire("chat")``: a permit from Redis, or from the local share while Redis is down."""

    __slots__ = ("_token",)

    def __init__(
        self, manager: ClusterManager, backend: Any, timeout: float | None, low_priority: bool = False
    ) -> None:
        super().__init__(manager, backend, timeout, low_priority)
        self._token: str | None = None

    async def __aenter__(self) -> ClusterPermit:
        if self._held:
            raise RuntimeError("this LLMPermit is already held; call acquire() again for another permit")
        m = self._cluster
        started = m._clock()
        if m.state == "redis":
            token = await m._acquire_remote(self._backend.name, self._timeout, self._low_priority)
            if token is not None:
                self._token, self._held = token, True
                self.waited_s = m._clock() - started
                return self
            if self._timeout is not None:  # Redis failed while we waited: the rest of the wait is local
                self._timeout = max(0.0, self._timeout - (m._clock() - started))
        await super().__aenter__()
        self._token = m._local_taken(self._backend.name)
        self.waited_s = m._clock() - started
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        m = self._cluster
        if token is not None and token in m._remote_tokens:
            if not self._held:
                raise RuntimeError("this LLMPermit is not held")
            self._held = False
            if exc_type is None and (ctx := _current.get()) is not None:
                ctx.completed_calls += 1
            m._remote_done(self._backend.name, token)
            return
        if token is not None:
            m._forget(self._backend.name, token)
        await super().__aexit__(exc_type, exc, tb)

    @property
    def _cluster(self) -> ClusterManager:
        manager = self._manager
        assert isinstance(manager, ClusterManager)
        return manager


class ClusterManager(LLMConcurrencyManager):
    """Cluster-wide limits through Redis; see the module docstring. ``limits`` are for the whole cluster."""

    def __init__(
        self,
        limits: Mapping[str, int],
        *,
        redis_url: str,
        prefix: str,
        worker_id: str,
        workers_index_key: str = "",
        lease_seconds: float = 5.0,
        refresh_interval: float = 1.0,
        op_timeout: float = 2.0,
        workers_max_age: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        **options: Any,
    ) -> None:
        if not refresh_interval * 2 < lease_seconds:
            raise ValueError(f"lease_seconds ({lease_seconds}) must exceed twice refresh_interval ({refresh_interval})")
        super().__init__(limits, clock=clock, **options)
        self._cluster_limits = {name: _check_limit(name, n) for name, n in limits.items()}
        self.redis_url = redis_url
        self.prefix = prefix
        self.worker_id = worker_id
        self.workers_index_key = workers_index_key
        self.lease_seconds = float(lease_seconds)
        self.refresh_interval = float(refresh_interval)
        self.op_timeout = float(op_timeout)
        self.workers_max_age = float(workers_max_age)
        self.state = "redis"
        self.live_workers = 1
        self._link: RedisLink | None = None
        self._link_tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._held: dict[str, set[str]] = {name: set() for name in limits}  # every permit out here, by backend
        self._remote_tokens: set[str] = set()  # those drawn from Redis
        self._counted_locally: set[str] = set()  # Redis permits counted in the local share during an outage
        self._waiters: dict[str, _RemoteWaiter] = {}
        self._counts = {name: _Counts() for name in limits}
        self._view = _View()
        self._apply_shares()

    # ------------------------------------------------------------------ limits

    def limit(self, backend: str) -> int:
        self._get_backend(backend)
        return self._cluster_limits[backend]

    def set_limit(self, backend: str, n: int) -> None:
        """The cluster's limit; the local share (used while Redis is down) follows it."""
        self._cluster_limits[backend] = _check_limit(backend, n)
        self._held.setdefault(backend, set())
        self._counts.setdefault(backend, _Counts())
        super().set_limit(backend, self.share(backend))

    def share(self, backend: str) -> int:
        return max(1, self._cluster_limits[backend] // max(1, self.live_workers))

    def _apply_shares(self) -> None:
        for name in self._cluster_limits:
            if self._backends[name].limit != self.share(name):
                super().set_limit(name, self.share(name))

    def acquire(self, backend: str, timeout: float | None = None, *, low_priority: bool = False) -> ClusterPermit:
        permit = super().acquire(backend, timeout)
        return ClusterPermit(self, permit._backend, timeout, low_priority)

    def _common(self, backend: str) -> list[Any]:
        link = self._link
        assert link is not None
        return link._common(
            self._cluster_limits[backend],
            round(self.lease_seconds * 1000),
            round(self.starvation_threshold * 1000),
            self.priority_enabled,
        )

    # ------------------------------------------------------------------ Redis permits

    async def _acquire_remote(self, backend: str, max_wait: float | None, low_priority: bool = False) -> str | None:
        """A permit token from Redis, or None when Redis failed (the caller falls back to the local share)."""
        link = self._ensure_link()
        counts = self._counts[backend]
        # As in the local manager, the waiter bound and a zero wait only matter when no permit is free.
        queue_full = sum(1 for w in self._waiters.values() if w.backend == backend) >= self.max_waiters
        wait_limit = self.acquire_timeout if max_wait is None else max_wait
        may_queue = not queue_full and wait_limit > 0
        waiter = self._new_waiter(backend, low_priority)
        self._waiters[waiter.token] = waiter
        try:
            granted, now_ms = await redis_call(
                link.acquire(backend, waiter.token, waiter.score, self._common(backend), may_queue=may_queue)
            )
        except REDIS_ERRORS as exc:
            del self._waiters[waiter.token]
            self._degrade(exc)
            return None
        except asyncio.CancelledError:
            self._withdraw(waiter)
            raise
        waiter.enqueued_ms = now_ms
        if not granted and not may_queue:
            del self._waiters[waiter.token]
            if queue_full:
                counts.rejected += 1
                raise self._busy(backend, "rejected", 0.0)
            counts.timeout += 1
            raise self._busy(backend, "timeout", 0.0)
        if not granted:
            remaining = wait_limit - (self._clock() - waiter.started)
            try:
                async with asyncio.timeout(max(0.0, remaining)):
                    granted = await waiter.fut
            except TimeoutError:
                self._withdraw(waiter)
                counts.timeout += 1
                raise self._busy(backend, "timeout", self._clock() - waiter.started) from None
            except asyncio.CancelledError:
                self._withdraw(waiter)
                raise
            if not granted:  # Redis went away while we waited
                self._waiters.pop(waiter.token, None)
                return None
        self._waiters.pop(waiter.token, None)
        self._taken(backend, waiter)
        return waiter.token

    def _new_waiter(self, backend: str, low_priority: bool = False) -> _RemoteWaiter:
        now = self._clock()
        ctx = _current.get()
        if ctx is None:
            priority, arrival, request_id = -1, now, None
        else:
            priority, arrival, request_id = -(ctx.completed_calls + 1), ctx.arrival, ctx.request_id
        if low_priority:
            # A positive score: the scripts queue it apart, behind every request's call (in arrival order).
            priority, arrival = LOW_PRIORITY, now
        # The request's arrival on the wall clock, so requests on different hosts compare (to their clock skew).
        arrival_ms = round((time.time() - (now - arrival)) * 1000)
        token = f"{self.worker_id}|{uuid.uuid4().hex}"
        fut = asyncio.get_running_loop().create_future()
        score = priority * _PRIORITY_FACTOR + arrival_ms
        return _RemoteWaiter(fut, backend, token, score, priority, request_id, now)

    def _taken(self, backend: str, waiter: _RemoteWaiter) -> None:
        self._held[backend].add(waiter.token)
        self._remote_tokens.add(waiter.token)
        self._counts[backend].acquired += 1
        waited = self._clock() - waiter.started
        self._backends[backend].window.record(self._clock(), waited)
        ctx = _current.get()
        if ctx is not None:
            ctx.permit_wait_s += waited

    def _withdraw(self, waiter: _RemoteWaiter) -> None:
        """A waiter that timed out or was cancelled leaves the queue (or gives back the permit granted meanwhile)."""
        self._waiters.pop(waiter.token, None)
        self._release_later(waiter.backend, waiter.token)

    def _remote_done(self, backend: str, token: str) -> None:
        self._held[backend].discard(token)
        self._remote_tokens.discard(token)
        self._counts[backend].released += 1
        if token in self._counted_locally:
            self._counted_locally.discard(token)
            self._release(self._backends[backend])
        self._release_later(backend, token)

    def _local_taken(self, backend: str) -> str:
        """A permit of the local share: it gets a token too, so Redis counts it once it answers again."""
        token = f"{self.worker_id}|{uuid.uuid4().hex}"
        self._held[backend].add(token)
        return token

    def _forget(self, backend: str, token: str) -> None:
        self._held[backend].discard(token)
        if self.state == "redis":
            self._release_later(backend, token)

    def _release_later(self, backend: str, token: str) -> None:
        """Tell Redis in the background: the caller never waits for it, and a failure only lets the lease run out."""
        link = self._link
        if link is None or self.state != "redis" or link.loop is not asyncio.get_running_loop():
            return
        task = link.loop.create_task(self._release_now(link, backend, token))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release_now(self, link: RedisLink, backend: str, token: str) -> None:
        try:
            await link.release(backend, token, self._common(backend))
        except REDIS_ERRORS as exc:
            logger.debug("releasing LLM permit %s failed (%s); its lease runs out instead", token, exc)

    def _on_grant(self, token: str) -> None:
        waiter = self._waiters.get(token)
        if waiter is not None and not waiter.fut.done():
            waiter.fut.set_result(True)

    def _busy(self, backend: str, reason: Any, waited: float) -> BusyError:
        view = self._view
        return BusyError(
            backend,
            reason,
            self._retry_after(self._backends[backend]),
            waited,
            view.in_progress.get(backend, len(self._held[backend])),
            view.waiting.get(backend, 0),
            self._cluster_limits[backend],
        )

    # ------------------------------------------------------------------ outage and recovery

    def _degrade(self, exc: BaseException) -> None:
        if self.state != "redis":
            return
        self.state = "degraded"
        logger.warning(
            "LLM permits: Redis unreachable (%s); this worker now allows its share alone (limit / %d live workers: "
            "%s) until Redis answers",
            exc,
            self.live_workers,
            {name: self.share(name) for name in self._cluster_limits},
        )
        for backend, tokens in self._held.items():
            for token in tokens & self._remote_tokens:
                # Still running: counted in the share, so this worker stays within it.
                self._counted_locally.add(token)
                self._backends[backend].in_progress += 1
        for waiter in list(self._waiters.values()):
            if not waiter.fut.done():
                waiter.fut.set_result(False)

    async def _recover(self, link: RedisLink) -> None:
        self.state = "recovering"
        try:
            await self._refresh(link)  # count the permits taken meanwhile before new ones are drawn
        except REDIS_ERRORS:
            self.state = "degraded"
            return
        self.state = "redis"
        logger.warning("LLM permits: Redis answers again; permits are drawn from the cluster's limit again")

    # ------------------------------------------------------------------ the link and its tasks

    def _ensure_link(self) -> RedisLink:
        loop = asyncio.get_running_loop()
        link = self._link
        if link is not None and link.loop is loop:
            return link
        if link is not None and not link.loop.is_closed():
            raise RuntimeError("ClusterManager is in use on another event loop; use one manager per loop")
        link = self._link = RedisLink(
            self.redis_url, prefix=self.prefix, worker_id=self.worker_id, op_timeout=self.op_timeout
        )
        self._link_tasks = [
            loop.create_task(self._keep(link), name="llm-permits-keeper"),
            loop.create_task(link.listen(self._on_grant, self._listen_failed), name="llm-permits-grants"),
        ]
        return link

    def _listen_failed(self, exc: BaseException) -> None:
        logger.debug("LLM permits: the grant channel broke (%s); reconnecting", exc)

    async def _keep(self, link: RedisLink) -> None:
        """Every refresh_interval: renew this worker's leases and look at the cluster; while degraded, probe Redis."""
        while True:
            if self.state == "redis":
                try:
                    await redis_call(self._refresh(link))
                except REDIS_ERRORS as exc:
                    self._degrade(exc)
            else:
                with contextlib.suppress(*REDIS_ERRORS):
                    await redis_call(link.ping())
                    await redis_call(self._recover(link))
            await asyncio.sleep(self.refresh_interval if self.state == "redis" else self.refresh_interval / 2)

    async def _refresh(self, link: RedisLink) -> None:
        view = _View(refreshed_at=time.time())
        for backend in list(self._cluster_limits):
            waiting = [
                w.token
                for w in list(self._waiters.values())
                if w.backend == backend and w.enqueued_ms and not w.fut.done()
            ]
            holders = list(self._held.get(backend, ()))
            seen = await link.refresh(backend, holders, waiting, self._common(backend))
            for token in seen.granted:
                self._on_grant(token)
            await self._adopt(link, backend, seen.lost_holders, seen.lost_waiters)
            view.in_progress[backend] = len(seen.holders)
            view.waiting[backend] = seen.queued
            view.by_worker[backend] = dict(Counter(t.rpartition("|")[0] for t in seen.holders))
        if self.workers_index_key:
            live = await link.live_workers(self.workers_index_key, time.time() - self.workers_max_age)
            self.live_workers = max(1, live)
            self._apply_shares()
        self._view = view

    async def _adopt(self, link: RedisLink, backend: str, lost_holders: list[str], lost_waiters: list[str]) -> None:
        """What Redis lost but is still running or waiting here (checked now, after the refresh's round trip: a
        permit released meanwhile is not counted again)."""
        held = self._held.get(backend, set())
        holders = [t for t in lost_holders if t in held]
        waiters = [
            (w.token, w.score, w.enqueued_ms)
            for t in lost_waiters
            if (w := self._waiters.get(t)) is not None and not w.fut.done()
        ]
        if holders or waiters:
            logger.info("LLM permits: counting %d permits and %d waiters again in Redis", len(holders), len(waiters))
            await link.adopt(backend, holders, waiters, self._common(backend))

    async def aclose(self) -> None:
        """Stop the tasks and close the connection (tests, shutdown); permits still out run out with their leases."""
        tasks, self._link_tasks = self._link_tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        if self._background:
            await asyncio.wait(set(self._background), timeout=2.0)
        link, self._link = self._link, None
        if link is not None:
            await link.close()

    # ------------------------------------------------------------------ stats

    def stats(self, *, queue_head: int = 5) -> ManagerStats:
        """This worker's permits and waiters (Redis and local share together), and the cluster as last seen."""
        result = super().stats(queue_head=queue_head)
        view = self._view
        cluster: dict[str, ClusterBackendStats] = {}
        for name, row in result["backends"].items():
            counts = self._counts.get(name, _Counts())
            remote_waiting = [w for w in list(self._waiters.values()) if w.backend == name]
            limit = self._cluster_limits.get(name, row["limit"])
            cluster_in_progress = view.in_progress.get(name, 0)
            row["limit"] = limit
            row["in_progress"] = len(self._held.get(name, ()))
            row["waiting"] += len(remote_waiting)
            row["available"] = max(0, limit - max(cluster_in_progress, row["in_progress"]))
            row["total_acquired"] += counts.acquired
            row["total_released"] += counts.released
            row["total_timeout"] += counts.timeout
            row["total_rejected"] += counts.rejected
            row["queue_head"] = (self._remote_head(remote_waiting) + row["queue_head"])[:queue_head]
            cluster[name] = {
                "limit": limit,
                "in_progress": cluster_in_progress,
                "waiting": view.waiting.get(name, 0),
                "by_worker": dict(view.by_worker.get(name, {})),
                "local_share": self.share(name) if name in self._cluster_limits else row["limit"],
            }
        result["cluster"] = ClusterStats(
            state=self.state,
            live_workers=self.live_workers,
            lease_seconds=self.lease_seconds,
            refreshed_at=view.refreshed_at,
            backends=cluster,
        )
        return result

    def _remote_head(self, waiters: list[_RemoteWaiter]) -> list[QueueHeadEntry]:
        now = self._clock()
        order = sorted(
            waiters,
            key=lambda w: (w.priority == LOW_PRIORITY, w.enqueued_ms) if not self.priority_enabled else (w.score,),
        )
        return [
            {
                "request_id": w.request_id,
                "priority": w.priority,
                "waited_ms": round((now - w.started) * 1000.0, 3),
                "boosted": self.priority_enabled
                and w.priority != LOW_PRIORITY
                and now - w.started >= self.starvation_threshold,
            }
            for w in order
        ]
