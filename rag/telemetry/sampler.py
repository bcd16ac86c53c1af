"""Which requests are traced: decided once per request, from a hash of its id.

A hash rather than `random()` so that every worker (and the feedback endpoint, which may run in another worker
long after the answer) reaches the same decision for the same request id without sharing any state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

_BUCKETS = 1 << 64


@dataclass(frozen=True, slots=True)
class SamplerStats:
    sample_rate: float
    total_checks: int
    sampled_count: int
    actual_rate: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "sample_rate": self.sample_rate,
            "total_checks": self.total_checks,
            "sampled_count": self.sampled_count,
            "actual_rate": self.actual_rate,
        }


class TelemetrySampler:
    """`check(request_id)` once per request (counted); `decide(request_id)` to ask again later (not counted).

    The counters are only written from the event loop's thread (one `check` per request), so they need no lock.
    """

    __slots__ = ("_threshold", "sample_rate", "sampled_count", "total_checks")

    def __init__(self, sample_rate: float) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be between 0.0 and 1.0, got {sample_rate}")
        self.sample_rate = sample_rate
        # A request is sampled when the first 8 bytes of its hash, read as an integer, fall below the threshold.
        self._threshold = round(sample_rate * _BUCKETS)
        self.total_checks = 0
        self.sampled_count = 0

    def decide(self, request_id: str) -> bool:
        if self._threshold >= _BUCKETS:
            return True
        if self._threshold <= 0:
            return False
        digest = hashlib.blake2b(request_id.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") < self._threshold

    def check(self, request_id: str) -> bool:
        sampled = self.decide(request_id)
        self.total_checks += 1
        if sampled:
            self.sampled_count += 1
        return sampled

    def stats(self) -> SamplerStats:
        total = self.total_checks
        sampled = self.sampled_count
        return SamplerStats(
            sample_rate=self.sample_rate,
            total_checks=total,
            sampled_count=sampled,
            actual_rate=sampled / total if total else 0.0,
        )
