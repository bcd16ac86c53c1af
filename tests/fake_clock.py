"""A clock for code that takes one (`clock=`): it moves only when the test says so."""

from __future__ import annotations


class FakeClock:
    """Seconds (monotonic or epoch: the code under test decides) that change only through `advance`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
