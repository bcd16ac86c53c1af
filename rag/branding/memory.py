"""The organisation's words served from memory, refreshed in every worker when they change.

The same cross-worker signal as the prompt store's (prompts.memory): a generation value in Django's cache
(Redis with REDIS_URL, local memory otherwise), bumped after commit by every change. A worker reads it at most
once per `BRANDING_CHECK_INTERVAL` seconds (default 1) and reloads the row when it differs from the one it saw
last. Between checks a read is an attribute read: no database, no cache, no thread hop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache

from rag.branding.texts import Organisation

logger = logging.getLogger(__name__)

GENERATION_KEY = "branding:generation"
_NEVER_SEEN = object()


class OrganisationMemory:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._value: Organisation | None = None
        self._generation: object = _NEVER_SEEN
        self._checked_at = float("-inf")

    def _interval(self) -> float:
        return float(getattr(settings, "BRANDING_CHECK_INTERVAL", 1.0))

    def peek(self) -> Organisation | None:
        """The copy held when no check is due; None means "call `load` (off the event loop)"."""
        if self._value is None or self.clock() - self._checked_at >= self._interval():
            return None
        return self._value

    def load(self, read: Callable[[], Organisation]) -> Organisation:
        """Blocking: check the generation when due and re-read the row with `read` when it changed."""
        now = self.clock()
        with self._lock:
            if self._value is not None and now - self._checked_at < self._interval():
                return self._value
            try:
                generation = cache.get(GENERATION_KEY)
            except Exception:
                logger.warning("branding generation unreadable; serving the organisation's words from memory")
                generation = self._generation
            if self._value is None or generation != self._generation:
                self._value = read()
                self._generation = generation
            self._checked_at = now
            return self._value

    def drop(self) -> None:
        with self._lock:
            self._value = None
            self._generation = _NEVER_SEEN
            self._checked_at = float("-inf")


def generation_bump() -> None:
    """Tell every worker (this one at once, the others within the check interval) that the words changed.
    Called after commit; a missing key is recreated with a value no worker can have seen."""
    memory.drop()
    try:
        try:
            cache.incr(GENERATION_KEY)
        except ValueError:
            cache.set(GENERATION_KEY, time.time_ns(), timeout=None)
    except Exception:
        logger.exception("branding generation not bumped: other workers keep the old words until the next change")


memory = OrganisationMemory()


class MemoryOrganisation:
    """The `OrganisationSource` a server's pipeline uses: memory first, a thread hop only when a check is due."""

    def __init__(self, read: Callable[[], Organisation]) -> None:
        self._read = read

    async def get(self) -> Organisation:
        held = memory.peek()
        if held is not None:
            return held
        return await asyncio.to_thread(memory.load, self._read)
