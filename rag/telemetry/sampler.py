"""Which requests are traced: decided once per request, from a hash of its id.

A hash rather than `random()` so that every worker reaches the same decision for the same request id without
sharing any state. The rate can change at run time (staff edit it in the concurrency console); the decision a
request got when it ran is what counts afterwards, and it is recorded with the request (see `Telemetry.finish`),
never asked again later at whatever the rate has become.
"""

from __future__ import annotations

import hashlib
import math
import threading
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


def _checked_rate(sample_rate: float) -> float:
    rate = float(sample_rate)
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"sample_rate must be between 0.0 and 1.0, got {sample_rate}")
    return rate


class TelemetrySampler:
    """`check(request_id)` once per request (counted); `decide(request_id)` to ask without counting;
    `set_rate(rate)` from any thread.

    The rate and the threshold derived from it are one tuple, replaced whole under a lock and read with one
    attribute load, so a request never sees a new rate with an old threshold. The counters are only written from
    the event loop's thread (one `check` per request), so they need no lock; a rate change leaves them running
    (`actual_rate` is then the share sampled since start, across the rates in force).
    """

    __slots__ = ("_lock", "_rate", "sampled_count", "total_checks")

    def __init__(self, sample_rate: float) -> None:
        self._lock = threading.Lock()
        self._rate = self._rate_and_threshold(_checked_rate(sample_rate))
        self.total_checks = 0
        self.sampled_count = 0

    @staticmethod
    def _rate_and_threshold(rate: float) -> tuple[float, int]:
        # A request is sampled when the first 8 bytes of its hash, read as an integer, fall below the threshold.
        return rate, round(rate * _BUCKETS)

    @property
    def sample_rate(self) -> float:
        return self._rate[0]

    def set_rate(self, sample_rate: float) -> bool:
        """Use `sample_rate` for every request checked from now on; False (and no change) when it is the same.
        Raises ValueError outside 0..1."""
        rate = _checked_rate(sample_rate)
        with self._lock:
            if rate == self._rate[0]:
                return False
            self._rate = self._rate_and_threshold(rate)
        return True

    def decide(self, request_id: str) -> bool:
        threshold = self._rate[1]
        if threshold >= _BUCKETS:
            return True
        if threshold <= 0:
            return False
        digest = hashlib.blake2b(request_id.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") < threshold

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
