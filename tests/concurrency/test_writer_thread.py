"""`WriterThread`: a bounded queue that drops and counts, in-order handling, bounded drain and close."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from concurrency.writer_thread import WriterThread

WAIT = 10.0  # a bound for waits on events; none of these tests waits for it unless something is broken


class Gate:
    """A handler that records items and holds each one until released."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, item: int) -> None:
        self.entered.set()
        assert self.release.wait(WAIT)
        self.seen.append(item)


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.release.set()


def test_a_full_queue_drops_and_counts_instead_of_waiting(gate: Gate) -> None:
    writer: WriterThread[int] = WriterThread(gate, name="test-writer", queue_size=2)
    assert writer.submit(1)
    assert gate.entered.wait(WAIT)  # the thread holds item 1: the queue is empty again
    assert writer.submit(2) and writer.submit(3)
    assert writer.submit(4) is False

    assert writer.stats() == {"pending": 2, "queue_size": 2, "dropped": 1, "handled": 0, "errors": 0}
    gate.release.set()
    assert writer.drain(WAIT)
    assert gate.seen == [1, 2, 3]
    assert writer.stats()["handled"] == 3
    assert writer.close(WAIT)


def test_drain_and_close_give_up_after_their_timeout_on_a_stuck_writer(gate: Gate) -> None:
    writer: WriterThread[int] = WriterThread(gate, name="test-writer", queue_size=1)
    writer.submit(1)
    assert gate.entered.wait(WAIT)
    writer.submit(2)

    assert writer.drain(0.01) is False
    assert writer.close(0.01) is False  # the queue is full: the stop cannot even be queued
    assert writer.submit(3) is False and writer.dropped == 1  # closed: nothing more is taken
    gate.release.set()
    assert writer.drain(WAIT) and gate.seen == [1, 2]
    writer._thread.join(WAIT)  # closed, its queue empty: the thread ends without a stop item
    assert not writer.alive


def test_close_handles_what_is_queued_then_stops_the_thread(gate: Gate) -> None:
    writer: WriterThread[int] = WriterThread(gate, name="test-writer", queue_size=10)
    for item in range(5):
        writer.submit(item)
    gate.release.set()

    assert writer.close(WAIT)
    assert gate.seen == [0, 1, 2, 3, 4]
    assert not writer.alive and writer.closed
    assert writer.put(9, timeout=0.01) is False


def test_an_error_is_counted_and_the_thread_goes_on() -> None:
    seen: list[int] = []

    def handle(item: int) -> None:
        if item == 2:
            raise RuntimeError("boom")
        seen.append(item)

    writer: WriterThread[int] = WriterThread(handle, name="test-writer", queue_size=10)
    for item in (1, 2, 3):
        writer.submit(item)

    assert writer.drain(WAIT)
    assert seen == [1, 3] and writer.errors == 1 and writer.handled == 2
    assert writer.close(WAIT)


def test_a_fatal_error_ends_the_writer_which_then_drops_everything(gate: Gate) -> None:
    exited = threading.Event()

    def handle(item: int) -> None:
        gate(item)
        raise BrokenPipeError("the reader went away")

    writer: WriterThread[int] = WriterThread(
        handle, name="test-writer", queue_size=10, fatal=(BrokenPipeError,), on_exit=exited.set
    )
    writer.submit(1)
    assert gate.entered.wait(WAIT)
    writer.submit(2)  # queued behind the item that fails
    gate.release.set()

    assert exited.wait(WAIT)
    assert writer.drain(WAIT)  # the queued item was let go, not left for a drain to wait on
    assert writer.closed and writer.dropped == 1 and writer.errors == 0
    assert writer.submit(3) is False and writer.dropped == 2
    assert writer.close(WAIT)


def test_a_queue_needs_a_bound() -> None:
    with pytest.raises(ValueError, match="bound"):
        WriterThread(lambda item: None, name="test-writer", queue_size=0)
