"""A circuit breaker for the query embedder: when the embedding server is down, search on BM25 alone at once.

Without it, every question waited for the embedder's call policy (retries with backoff, 10 s of the tool's
timeout) and then found nothing. With it, a question's embedding gets `timeout` seconds; a failure or a timeout
opens the breaker, and for `retry_seconds` the questions skip the dense side without trying (BM25 alone, flagged
in `meta_summary`). After that one question tries again (the others keep to BM25 meanwhile): success closes the
breaker, failure opens it for another `retry_seconds`.

One per retriever, used on the event loop's thread only (no lock). The clock is injected for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["BreakerState", "EmbedderBreaker"]

logger = logging.getLogger(__name__)

State = Literal["closed", "open", "trying"]


@dataclass(frozen=True, slots=True)
class BreakerState:
    state: State
    failures: int  # in a row
    last_error: str
    retry_in: float  # seconds until a question tries the embedder again (0 when closed)
    skipped: int  # searches that went without the dense side since start


class EmbedderBreaker:
    def __init__(
        self, *, name: str, timeout: float, retry_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if timeout <= 0 or retry_seconds < 0:
            raise ValueError("timeout must be > 0 and retry_seconds >= 0")
        self.name = name
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._failures = 0
        self._retry_at = 0.0
        self._trying = False
        self._last_error = ""
        self._skipped = 0

    def allow(self) -> bool:
        """Whether this search may call the embedder: always when closed; when open, only the first search after
        the wait (its outcome decides), and no other while that one is out."""
        if self._failures == 0:
            return True
        if self._trying or self._clock() < self._retry_at:
            self._skipped += 1
            return False
        self._trying = True
        return True

    def succeeded(self) -> None:
        if self._failures:
            logger.info("embedder %s answers again after %d failures: dense search is back", self.name, self._failures)
        self._failures = 0
        self._trying = False
        self._last_error = ""

    def failed(self, reason: str) -> None:
        self._skipped += 1
        self._failures += 1
        self._trying = False
        self._last_error = reason
        self._retry_at = self._clock() + self.retry_seconds
        if self._failures == 1:
            logger.warning(
                "embedder %s failed (%s): searching with BM25 alone, trying it again every %g s",
                self.name,
                reason,
                self.retry_seconds,
            )

    def state(self) -> BreakerState:
        if self._failures == 0:
            return BreakerState("closed", 0, "", 0.0, self._skipped)
        return BreakerState(
            "trying" if self._trying else "open",
            self._failures,
            self._last_error,
            max(0.0, self._retry_at - self._clock()),
            self._skipped,
        )

    def stats(self) -> dict[str, object]:
        """For the concurrency console's per-worker extras."""
        current = self.state()
        return {
            "state": current.state,
            "failures": current.failures,
            "last_error": current.last_error,
            "dense_skipped": current.skipped,
        }
