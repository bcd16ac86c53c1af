"""The drain state: off while serving, on (with a closing window) once a drain starts, started once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatbot import lifecycle


@pytest.fixture(autouse=True)
def serving() -> Iterator[None]:
    lifecycle.reset_for_tests()
    yield
    lifecycle.reset_for_tests()


def test_a_worker_serves_until_a_drain_starts_then_drains_once() -> None:
    assert not lifecycle.is_draining()
    assert lifecycle.seconds_left() is None
    calls: list[str] = []
    lifecycle.on_drain(lambda: calls.append("first"))

    assert lifecycle.start_drain(30.0) is True
    assert lifecycle.is_draining()
    left = lifecycle.seconds_left()
    assert left is not None and 29.0 < left <= 30.0
    assert calls == ["first"]

    assert lifecycle.start_drain(1.0) is False  # a second SIGTERM neither restarts nor shortens the window
    left = lifecycle.seconds_left()
    assert left is not None and left > 29.0
    lifecycle.on_drain(lambda: calls.append("late"))  # registered after the start: called at once
    assert calls == ["first", "late"]
    assert lifecycle.retry_after_seconds() >= 1


def test_the_window_closes() -> None:
    lifecycle.start_drain(0.0)
    assert lifecycle.is_draining()
    assert lifecycle.seconds_left() == 0.0
