"""Where LLM permits come from: the ``PermitSource`` protocol, and what a caller brings to it.

``concurrency.manager.LLMConcurrencyManager`` is the one object callers use; it holds a source and keeps the books
(totals, wait times, retry advice, the request's progress), whatever the source. A source owns what differs: the
limits' counting, the queue of waiters and its order (FIFO, or priority with the starvation boost, low-priority
waiters last). Two implement it:

- ``concurrency.local_permits.LocalPermits``: this process alone, in memory;
- ``concurrency.cluster.permits.RedisPermits``: the whole cluster, leases and queues in Redis; composed with a local
  one by ``concurrency.cluster.fallback.FallbackPermits``, which serves a share of each limit locally while Redis
  does not answer.

``tests/concurrency/test_permit_ordering.py`` runs one ordering suite against both.

Pure asyncio/stdlib: nothing here may import Django, chat or the RAG pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from .stats import ClusterStats, QueueHeadEntry

__all__ = ["LOW_PRIORITY", "Occupancy", "PermitAsk", "PermitSource", "PermitsUnreachable"]

# The priority of a low-priority waiter (work done after an answer, such as its conversation summary): above any
# request's priority (-(completed calls + 1) <= -1), and served only when no other waiter is queued, in both modes.
LOW_PRIORITY = 1

Grant = TypeVar("Grant")


@dataclass(slots=True)  # not frozen: one is made per queued acquire, and a frozen one costs twice as much to make
class PermitAsk:
    """Who waits, for the order of the queue (read, never changed, by a source).

    ``priority``: lower goes first; a request's is -(completed LLM calls + 1), ``LOW_PRIORITY`` waits behind every
    request's call and is never boosted. ``arrival``: when the request arrived (the manager's clock), for ties.
    """

    priority: int
    arrival: float
    request_id: str | None

    @property
    def low(self) -> bool:
        return self.priority == LOW_PRIORITY


class Occupancy(NamedTuple):
    in_progress: int  # permits out
    waiting: int  # waiters queued
    limit: int


class PermitsUnreachable(Exception):
    """The source cannot give permits now (its server does not answer); a fallback may serve instead."""


class PermitSource(Protocol[Grant]):
    """Counts permits per backend and orders their waiters. Used from one event loop at a time.

    A source is configured by its manager (``set_limit``, ``set_order``) before and while it serves, and shares the
    manager's clock. ``Grant`` is what a source hands out and takes back: opaque to the manager.
    """

    def set_limit(self, backend: str, limit: int) -> None:
        """Add a backend or change its limit (checked by the manager). Up: waiters are admitted at once; down: calls
        in flight finish and nobody new is admitted until the permits out drop below the limit."""

    def set_order(self, *, priority: bool, starvation_threshold: float) -> None:
        """FIFO, or priority with the starvation boost after ``starvation_threshold`` seconds; waiters already
        queued are ordered by the new rule."""

    def try_take(self, backend: str) -> Grant | None:
        """A free permit at once when the source can tell without waiting and nobody is queued ahead; else None
        (then ``take``). No I/O: the manager's fast path."""

    async def take(self, backend: str, ask: PermitAsk, wait: float, *, may_queue: bool) -> Grant | None:
        """A permit, waiting at most ``wait`` seconds in the queue in ``ask``'s place; None when none came in time.
        ``may_queue`` False: only a free permit, at once. Cancelled while waiting, the waiter leaves the queue (or
        passes on a permit it was handed meanwhile). Raises ``PermitsUnreachable`` when the source cannot serve."""
        ...

    def give_back(self, backend: str, grant: Grant) -> None:
        """Return a permit; the next waiter gets it. Never waits (a remote source tells its server in the
        background)."""

    def here(self, backend: str) -> Occupancy:
        """This worker's permits out and waiters queued, and the limit."""
        ...

    def occupancy(self, backend: str) -> Occupancy:
        """The permits out and waiters queued wherever the limit applies (the whole cluster for a shared source, as
        last seen), and the limit: what a refused caller is told."""
        ...

    def queue_head(self, backend: str, size: int) -> list[QueueHeadEntry]:
        """This worker's first ``size`` waiters, in the order they would be served if permits freed up now."""
        ...

    def cluster_stats(self) -> ClusterStats | None:
        """The cluster as last seen, for a shared source; None for a local one."""
        ...

    async def aclose(self) -> None:
        """Stop background work and close connections (permits still out end with their leases)."""
