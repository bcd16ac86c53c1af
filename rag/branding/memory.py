"""Staff-edited rows served from memory, refreshed in every worker when they change: the organisation's words
here, the embedding sites (chatbot.sites) with the same class.

The same cross-worker signal as the prompt store's (prompts.memory): a generation value in Django's cache
(Redis with REDIS_URL, local memory otherwise), bumped after commit by every change. A worker reads it at most
once per `BRANDING_CHECK_INTERVAL` seconds (default 1) and reloads when it differs from the one it saw last.
Between checks a read is an attribute read: no database, no cache, no thread hop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.conf import settings
from django.core.cache import cache

from rag.branding.texts import Organisation

logger = logging.getLogger(__name__)

GENERATION_KEY = "branding:generation"
_NEVER_SEEN = object()
T = TypeVar("T")


def _cache_shared() -> bool:
    return "locmem" not in settings.CACHES["default"]["BACKEND"].lower()


class GenerationCopy(Generic[T]):
    """This worker's copy of what `read` returns, re-read when the generation under `key` changed."""

    def __init__(self, key: str = GENERATION_KEY, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._generation: object = _NEVER_SEEN
        self._checked_at = float("-inf")

    def _interval(self) -> float:
        return float(getattr(settings, "BRANDING_CHECK_INTERVAL", 1.0))

    def peek(self) -> T | None:
        """The copy held when no check is due; None means "call `load` (off the event loop)"."""
        if self._value is None or self.clock() - self._checked_at >= self._interval():
            return None
        return self._value

    def load(self, read: Callable[[], T]) -> T:
        """Blocking: check the generation when due and re-read the row with `read` when it changed."""
        now = self.clock()
        with self._lock:
            if self._value is not None and now - self._checked_at < self._interval():
                return self._value
            try:
                generation = cache.get(self.key)
            except Exception:
                logger.warning("%s unreadable; serving this worker's copy", self.key)
                generation = self._generation
            # Without a shared cache (no REDIS_URL) a change made by another process (a command) bumps nothing
            # this worker can see: the row is re-read every interval instead (one small query a second).
            if self._value is None or generation != self._generation or not _cache_shared():
                self._value = read()
                self._generation = generation
            self._checked_at = now
            return self._value

    def drop(self) -> None:
        with self._lock:
            self._value = None
            self._generation = _NEVER_SEEN
            self._checked_at = float("-inf")

    def bump(self) -> None:
        """Tell every worker (this one at once, the others within the check interval) that the rows changed.
        Called after commit; a missing key is recreated with a value no worker can have seen."""
        self.drop()
        try:
            try:
                cache.incr(self.key)
            except ValueError:
                cache.set(self.key, time.time_ns(), timeout=None)
        except Exception:
            logger.exception("%s not bumped: other workers keep their copy until the next change", self.key)


OrganisationMemory = GenerationCopy[Organisation]
memory: GenerationCopy[Organisation] = GenerationCopy(GENERATION_KEY)


def generation_bump() -> None:
    memory.bump()


class MemoryOrganisation:
    """The `OrganisationSource` a server's pipeline uses: memory first, a thread hop only when a check is due."""

    def __init__(self, read: Callable[[], Organisation]) -> None:
        self._read = read

    async def get(self) -> Organisation:
        held = memory.peek()
        if held is not None:
            return held
        return await asyncio.to_thread(memory.load, self._read)
