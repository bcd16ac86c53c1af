"""One LLM capacity for the whole cluster: permits drawn from Redis (a ``PermitSource``).

The limits are the LLM server's capacity for all workers together. A permit is a lease in Redis
(``concurrency.cluster.scripts``), renewed every ``refresh_interval`` by the worker that holds it, so a worker that
dies gives its permits back when their leases run out (``lease_seconds``). Waiters queue in Redis, in FIFO or
priority order with the starvation boost, whichever worker they are on; a permit given back is handed to the next
waiter inside the same script and announced to its worker at once.

When Redis does not answer, ``take`` raises ``PermitsUnreachable``, the state turns "degraded" and the listener
(``concurrency.cluster.fallback``, which then serves from a local share) is told; a background task probes Redis
and, once it answers, counts again in Redis what this worker still holds or waits for, then turns "redis" again.

Pure asyncio and redis.asyncio: nothing here imports Django, chat or the pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from concurrency.permits import LOW_PRIORITY, Occupancy, PermitAsk, PermitsUnreachable
from concurrency.stats import ClusterBackendStats, ClusterStats, QueueHeadEntry
from infra.redis_calls import redis_call

from .link import REDIS_ERRORS, RedisLink

__all__ = ["PermitsListener", "RedisPermits", "token_worker"]

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
    enqueued_ms: float = 0.0  # Redis's clock when it queued the waiter (0.0: not queued yet)


@dataclass(slots=True)
class _View:
    """The cluster as the last lease refresh saw it."""

    in_progress: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    by_worker: dict[str, dict[str, int]] = field(default_factory=dict)
    refreshed_at: float = 0.0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # called off the loop (a limit set from synchronous code)
        return None


class PermitsListener(Protocol):
    """Told when Redis stops or starts answering, and when the number of live workers changes."""

    def permits_down(self, exc: BaseException) -> None: ...

    def permits_up(self) -> None: ...

    def workers_changed(self) -> None: ...


_TOKEN_SEPARATOR = "|"


def token_worker(token: str) -> str:
    """The id of the worker a permit's or a waiter's token belongs to (``worker_id|random``)."""
    return token.rpartition(_TOKEN_SEPARATOR)[0]


class RedisPermits:
    """Cluster-wide permits through Redis; see the module docstring. Grants are permit tokens
    (``<worker id>|<uuid>``)."""

    def __init__(
        self,
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
    ) -> None:
        if not refresh_interval * 2 < lease_seconds:
            raise ValueError(f"lease_seconds ({lease_seconds}) must exceed twice refresh_interval ({refresh_interval})")
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
        self.listener: PermitsListener | None = None
        self._clock = clock
        self._limits: dict[str, int] = {}
        self._priority = False
        self._starvation_threshold = 10.0
        self._link: RedisLink | None = None
        self._link_tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._held: dict[str, set[str]] = {}  # every permit out here, by backend (those ``track``ed too)
        self._drawn: set[str] = set()  # those drawn from Redis
        self._waiters: dict[str, _RemoteWaiter] = {}
        self._view = _View()

    # ------------------------------------------------------------------ configuration

    @property
    def clock(self) -> Callable[[], float]:
        """The clock its leases and waits are measured on (the manager and the fallback keep the same one)."""
        return self._clock

    def set_limit(self, backend: str, limit: int) -> None:
        raised = limit > self._limits.get(backend, limit)
        self._limits[backend] = limit
        self._held.setdefault(backend, set())
        if raised:
            # The scripts hand out free permits whenever they run: run one now, so waiters get the room at once.
            self._release_later(backend, "")

    def set_order(self, *, priority: bool, starvation_threshold: float) -> None:
        self._priority = priority
        self._starvation_threshold = starvation_threshold

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self._limits)

    def share(self, backend: str) -> int:
        """This worker's part of the cluster's limit (limit / live workers), what it allows alone while Redis is
        unreachable."""
        return max(1, self._limits[backend] // max(1, self.live_workers))

    def _common(self, backend: str) -> list[Any]:
        link = self._link
        assert link is not None
        return link.script_args(
            self._limits[backend],
            round(self.lease_seconds * 1000),
            round(self._starvation_threshold * 1000),
            self._priority,
        )

    # ------------------------------------------------------------------ taking and giving back

    def try_take(self, backend: str) -> str | None:
        return None  # only Redis can tell, and asking it is a round trip: take() does

    async def take(self, backend: str, ask: PermitAsk, wait: float, *, may_queue: bool) -> str | None:
        if self.state != "redis":
            raise PermitsUnreachable(f"Redis permits are {self.state}")
        link = self._ensure_link()
        waiter = self._new_waiter(backend, ask)
        self._waiters[waiter.token] = waiter
        try:
            granted, now_ms = await redis_call(
                link.acquire(backend, waiter.token, waiter.score, self._common(backend), may_queue=may_queue)
            )
        except REDIS_ERRORS as exc:
            del self._waiters[waiter.token]
            self._degrade(exc)
            raise PermitsUnreachable(str(exc)) from exc
        except asyncio.CancelledError:
            self._withdraw(waiter)
            raise
        waiter.enqueued_ms = now_ms
        if not granted and not may_queue:
            del self._waiters[waiter.token]
            return None
        if not granted:
            remaining = wait - (self._clock() - waiter.started)
            try:
                async with asyncio.timeout(max(0.0, remaining)):
                    granted = await waiter.fut
            except TimeoutError:
                self._withdraw(waiter)
                return None
            except asyncio.CancelledError:
                self._withdraw(waiter)
                raise
            if not granted:
                self._waiters.pop(waiter.token, None)
                raise PermitsUnreachable("Redis stopped answering while this waiter was queued")
        self._waiters.pop(waiter.token, None)
        self._held[backend].add(waiter.token)
        self._drawn.add(waiter.token)
        return waiter.token

    def _new_waiter(self, backend: str, ask: PermitAsk) -> _RemoteWaiter:
        now = self._clock()
        # The request's arrival on the wall clock, so requests on different hosts compare (to their clock skew).
        arrival_ms = round((time.time() - (now - ask.arrival)) * 1000)
        token = self._new_token()
        fut = asyncio.get_running_loop().create_future()
        # A positive score (low priority): the scripts queue it apart, behind every request's call.
        score = ask.priority * _PRIORITY_FACTOR + arrival_ms
        return _RemoteWaiter(fut, backend, token, score, ask.priority, ask.request_id, now)

    def _new_token(self) -> str:
        return f"{self.worker_id}{_TOKEN_SEPARATOR}{uuid.uuid4().hex}"

    def track(self, backend: str) -> str:
        """A permit of this worker drawn elsewhere (the local share during an outage): its token is renewed here
        like the others, so Redis counts it once it answers again. Give it back with ``give_back``."""
        token = self._new_token()
        self._held[backend].add(token)
        return token

    def drawn(self) -> list[tuple[str, str]]:
        """(backend, token) of the permits drawn from Redis and still out here."""
        return [(backend, token) for backend, tokens in self._held.items() for token in tokens & self._drawn]

    def give_back(self, backend: str, grant: str) -> None:
        self._held[backend].discard(grant)
        self._drawn.discard(grant)
        self._release_later(backend, grant)

    def _withdraw(self, waiter: _RemoteWaiter) -> None:
        """A waiter that timed out or was cancelled leaves the queue (or gives back the permit granted meanwhile)."""
        self._waiters.pop(waiter.token, None)
        self._release_later(waiter.backend, waiter.token)

    def _release_later(self, backend: str, token: str) -> None:
        """Tell Redis in the background: the caller never waits for it, and a failure only lets the lease run out.
        Whatever the token, the script hands free permits to the next waiters."""
        link = self._link
        if link is None or self.state != "redis" or link.loop is not _running_loop():
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

    # ------------------------------------------------------------------ outage and recovery

    def _degrade(self, exc: BaseException) -> None:
        if self.state != "redis":
            return
        self.state = "degraded"
        if self.listener is not None:
            self.listener.permits_down(exc)
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
        if self.listener is not None:
            self.listener.permits_up()

    # ------------------------------------------------------------------ the link and its tasks

    def _ensure_link(self) -> RedisLink:
        loop = asyncio.get_running_loop()
        link = self._link
        if link is not None and link.loop is loop:
            return link
        if link is not None and not link.loop.is_closed():
            raise RuntimeError("LLMConcurrencyManager is in use on another event loop; use one manager per loop")
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
        for backend in list(self._limits):
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
            view.by_worker[backend] = dict(Counter(token_worker(t) for t in seen.holders))
        if self.workers_index_key:
            live = max(1, await link.live_workers(self.workers_index_key, time.time() - self.workers_max_age))
            changed, self.live_workers = live != self.live_workers, live
            if changed and self.listener is not None:
                self.listener.workers_changed()
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

    # ------------------------------------------------------------------ reads

    def _queued_here(self, backend: str) -> list[_RemoteWaiter]:
        """This worker's waiters of ``backend`` that Redis has queued and not yet served."""
        return [w for w in list(self._waiters.values()) if w.backend == backend and w.enqueued_ms and not w.fut.done()]

    def here(self, backend: str) -> Occupancy:
        return Occupancy(len(self._held[backend]), len(self._queued_here(backend)), self._limits[backend])

    def occupancy(self, backend: str) -> Occupancy:
        view = self._view
        return Occupancy(
            view.in_progress.get(backend, len(self._held[backend])),
            view.waiting.get(backend, 0),
            self._limits[backend],
        )

    def queue_head(self, backend: str, size: int) -> list[QueueHeadEntry]:
        """This worker's waiters in the scripts' order: boosted ones oldest first, then by score (priority mode) or
        oldest first (FIFO), low-priority ones last."""
        if size <= 0:
            return []
        now = self._clock()
        waiters = sorted(self._queued_here(backend), key=lambda w: w.enqueued_ms)
        requests = [w for w in waiters if w.priority != LOW_PRIORITY]
        order = requests
        if self._priority:
            boosted = [w for w in requests if self._boosted(w, now)]
            rest = sorted((w for w in requests if not self._boosted(w, now)), key=lambda w: (w.score, w.enqueued_ms))
            order = boosted + rest
        order += [w for w in waiters if w.priority == LOW_PRIORITY]
        return [
            {
                "request_id": w.request_id,
                "priority": w.priority,
                "waited_ms": round((now - w.started) * 1000.0, 3),
                "boosted": self._priority and w.priority != LOW_PRIORITY and self._boosted(w, now),
            }
            for w in order[:size]
        ]

    def _boosted(self, waiter: _RemoteWaiter, now: float) -> bool:
        return now - waiter.started >= self._starvation_threshold

    def cluster_stats(self) -> ClusterStats:
        view = self._view
        backends: dict[str, ClusterBackendStats] = {
            name: {
                "limit": limit,
                "in_progress": view.in_progress.get(name, 0),
                "waiting": view.waiting.get(name, 0),
                "by_worker": dict(view.by_worker.get(name, {})),
                "local_share": self.share(name),
            }
            for name, limit in list(self._limits.items())
        }
        return ClusterStats(
            state=self.state,
            live_workers=self.live_workers,
            lease_seconds=self.lease_seconds,
            refreshed_at=view.refreshed_at,
            backends=backends,
        )
