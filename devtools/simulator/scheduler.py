"""vLLM-like admission: a fixed number of decode slots and a FIFO waiting queue, plus the timing model."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from devtools.simulator.config import SimulatorConfig


class QueueFull(Exception):
    """The waiting queue is at max_waiting; the request is refused (503) rather than queued."""


class Scheduler:
    """At most ``max_num_seqs`` holders at once; later arrivals wait in strict FIFO order.

    A released slot is handed straight to the oldest waiter (``running`` does not dip), which is how a
    continuous-batching engine refills its batch on the next step. A waiter that is cancelled (client gone)
    leaves the queue, and if it was cancelled just after being handed a slot, it passes the slot on.
    """

    def __init__(self, max_num_seqs: int, max_waiting: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_waiting = max_waiting
        self._running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def check_capacity(self) -> None:
        """Raise QueueFull if a new arrival would have to wait in an already full queue."""
        if self._running >= self.max_num_seqs and len(self._waiters) >= self.max_waiting:
            raise QueueFull

    async def acquire(self) -> None:
        if self._running < self.max_num_seqs and not self._waiters:
            self._running += 1
            return
        self.check_capacity()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over in the same tick as the cancellation: give it to the next one.
                self.release()
            elif waiter in self._waiters:  # release() may already have skipped and dropped it
                self._waiters.remove(waiter)
            raise

    def resize(self, max_num_seqs: int, max_waiting: int) -> None:
        """New bounds, as a restarted server would have them: a larger batch admits waiters at once; a smaller one
        lets the running sequences finish and admits no one until fewer than ``max_num_seqs`` run."""
        self.max_num_seqs = max_num_seqs
        self.max_waiting = max_waiting
        while self._running < self.max_num_seqs and self._admit_next():
            self._running += 1

    def _admit_next(self) -> bool:
        """Hand a slot to the oldest waiter still waiting; False if there is none."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return True
        return False

    def release(self) -> None:
        # Over the bound only after a resize to a smaller batch: the slot is not handed on but given up.
        if self._running > self.max_num_seqs or not self._admit_next():
            self._running -= 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()


class TimingModel:
    """Step times that grow with the running batch, as decode on a GPU does."""

    def __init__(self, config: SimulatorConfig, scheduler: Scheduler) -> None:
        self._config = config
        self._scheduler = scheduler

    def slowdown(self) -> float:
        running = max(self._scheduler.running, 1)
        return 1.0 + self._config.batch_slowdown * (running - 1) / self._config.max_num_seqs

    def prefill_seconds(self, prompt_tokens: int) -> float:
        base_ms = self._config.ttft_ms + self._config.prefill_ms_per_token * prompt_tokens
        return base_ms * self.slowdown() / 1000.0

    def tpot_seconds(self) -> float:
        return self._config.tpot_ms * self.slowdown() / 1000.0
