"""SingleFlight: one background fetch per key, bounded, and waiters never left hanging."""

import threading
from concurrent.futures import Future
from typing import TypeVar

import pytest

from prompts.refresh import SingleFlight

T = TypeVar("T")


def started(future: Future[T] | None) -> Future[T]:
    assert future is not None, "the fetch was refused"
    return future


def test_a_key_in_flight_returns_the_running_fetch_instead_of_starting_another():
    flights = SingleFlight(name="test-refresh")
    release = threading.Event()
    calls = []

    def fetch():
        calls.append(1)
        release.wait(5)
        return "fetched"

    first = started(flights.start("planner", fetch))
    assert flights.start("planner", fetch) is first
    release.set()
    assert first.result(timeout=5) == "fetched"
    assert flights.wait_idle(5)
    assert calls == [1]
    again = started(flights.start("planner", lambda: "again"))  # done: a new fetch may start
    assert again.result(timeout=5) == "again"


def test_no_fetch_starts_beyond_the_bound():
    flights = SingleFlight(name="test-refresh", max_in_flight=1)
    release = threading.Event()
    running = started(flights.start("planner", lambda: release.wait(5)))
    assert flights.start("translator", lambda: "never") is None
    release.set()
    assert running.result(timeout=5) is True
    assert flights.wait_idle(5)


def test_a_failing_fetch_reaches_its_waiters_and_frees_its_key(caplog):
    flights = SingleFlight(name="test-refresh")

    def broken():
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        started(flights.start("planner", broken)).result(timeout=5)
    assert flights.wait_idle(5)
    assert flights.in_flight() == 0
