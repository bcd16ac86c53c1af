"""Per-process counts of how answers were made, for the concurrency console (`register_stats_provider`)."""

from __future__ import annotations

import threading


class AnswerStats:
    """Thread-safe counters; `stats()` is what the console shows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._degraded = 0
        # conversation summaries written after the answer: by the model, or the offline one kept (failed, timed out)
        self._summaries = {"summary_llm": 0, "summary_fallback": 0}

    def degraded(self) -> None:
        with self._lock:
            self._degraded += 1

    def summary(self, *, fallback: bool) -> None:
        with self._lock:
            self._summaries["summary_fallback" if fallback else "summary_llm"] += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"degraded": self._degraded, **self._summaries}
