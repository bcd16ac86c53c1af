"""A worker's copy of staff-edited rows, dropped when their topic changes on the change feed.

A change publishes its topic (`infra.changefeed`) after commit; this worker drops its copy at once (`bump`), and
every other worker's watcher drops its copy when the notice arrives (register `on_change(copy.topic, copy.drop)`).
The next read loads the rows again, once, off the event loop. Between changes a read is an attribute read: no
database, no cache, no thread hop. The organisation's words (`rag.branding.memory`) and the embedding sites
(`chatbot.sites.selectors`) are such copies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from infra.changefeed import publish

__all__ = ["FeedCopy"]

T = TypeVar("T")


class FeedCopy(Generic[T]):
    """This worker's copy of what `read` returns, dropped when `topic` changes on the change feed."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._lock = threading.Lock()
        self._value: T | None = None

    def peek(self) -> T | None:
        """The copy held; None means "call `load` (off the event loop)"."""
        return self._value

    def load(self, read: Callable[[], T]) -> T:
        """Blocking: the copy, read with `read` when there is none."""
        with self._lock:
            if self._value is None:
                self._value = read()
            return self._value

    def drop(self, topic: str = "") -> None:
        """Forget the copy (the change feed's handler: `on_change(copy.topic, copy.drop)`)."""
        with self._lock:
            self._value = None

    def bump(self) -> None:
        """Called after commit: drop this worker's copy and tell every other worker through the change feed."""
        self.drop()
        publish(self.topic)
