"""`WriterThread`: a bounded queue that drops and counts, in-order handling, bounded drain and close."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from infra.writer_thread import WriterThread

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


def test_a_batch_handler_takes_what_is_queued_up_to_the_batch_size(gate: Gate) -> None:
    batches: list[list[int]] = []

    def handle_batch(batch: list[int]) -> None:
        gate(batch[0])
        batches.append(batch)

    writer: WriterThread[int] = WriterThread(name="test-writer", queue_size=10, handle_batch=handle_batch, batch_size=3)
    writer.submit(0)
    assert gate.entered.wait(WAIT)  # the thread holds [0]: the rest queue behind it
    for item in range(1, 6):
        writer.submit(item)
    gate.release.set()

    assert writer.drain(WAIT)
    assert batches == [[0], [1, 2, 3], [4, 5]]
    assert writer.handled == 6
    assert writer.close(WAIT)


def test_a_failing_batch_counts_one_error_and_the_thread_goes_on() -> None:
    batches: list[list[int]] = []

    def handle_batch(batch: list[int]) -> None:
        batches.append(batch)
        if 2 in batch:
            raise RuntimeError("boom")

    writer: WriterThread[int] = WriterThread(name="test-writer", queue_size=10, handle_batch=handle_batch)
    for item in (1, 2, 3):
        writer.submit(item)

    assert writer.drain(WAIT)
    assert batches == [[1], [2], [3]] and writer.errors == 1 and writer.handled == 2
    assert writer.close(WAIT)


def test_the_tick_and_the_after_hook_run_after_each_unit_before_drain_returns() -> None:
    events: list[str] = []

    def tick(stopping: bool) -> float:
        events.append(f"tick stopping={stopping}")
        return 3600.0  # never due again while idle

    writer: WriterThread[int] = WriterThread(
        lambda item: events.append(f"item {item}"),
        name="test-writer",
        queue_size=10,
        tick=tick,
        tick_after=3600.0,
        after=lambda: events.append("after"),
    )
    writer.submit(1)
    assert writer.drain(WAIT)
    assert events == ["item 1", "tick stopping=False", "after"]

    assert writer.close(WAIT)
    assert events[3:] == ["tick stopping=True", "after"]


def test_an_idle_writer_ticks_when_the_delay_its_tick_returned_ran_out() -> None:
    calls: list[bool] = []
    third = threading.Event()

    def tick(stopping: bool) -> float:
        calls.append(stopping)
        if len(calls) == 3:
            third.set()
            return 3600.0
        return 0.0  # due again at once

    writer: WriterThread[int] = WriterThread(
        lambda item: None, name="test-writer", queue_size=1, tick=tick, tick_after=0.0
    )

    assert third.wait(WAIT)  # nothing was ever queued: the first tick came after `tick_after`, then as asked
    assert writer.handled == 0
    assert writer.close(WAIT)
    assert calls == [False, False, False, True]


def test_a_failing_tick_is_counted_and_the_after_hook_still_runs() -> None:
    after = threading.Event()

    def tick(stopping: bool) -> float:
        raise RuntimeError("the database went away")

    writer: WriterThread[int] = WriterThread(
        lambda item: None, name="test-writer", queue_size=1, tick=tick, tick_after=3600.0, after=after.set
    )
    writer.submit(1)

    assert writer.drain(WAIT)
    assert after.is_set() and writer.errors == 1 and writer.handled == 1
    writer.close(WAIT)


def test_a_writer_made_without_starting_queues_until_started(gate: Gate) -> None:
    writer: WriterThread[int] = WriterThread(gate, name="test-writer", queue_size=2, start=False)
    assert writer.submit(1) and writer.submit(2)
    assert writer.submit(3) is False  # the bound holds before the start too
    assert not writer.started and not writer.alive and writer.started_at is None

    gate.release.set()
    before = time.monotonic()
    writer.start()
    started_at = writer.started_at
    writer.start()  # once only
    assert started_at is not None and before <= started_at <= time.monotonic() and writer.started_at == started_at
    assert writer.drain(WAIT) and gate.seen == [1, 2]
    assert writer.close(WAIT)


def test_closing_a_writer_that_never_started_lets_its_items_go() -> None:
    writer: WriterThread[int] = WriterThread(lambda item: None, name="test-writer", queue_size=2, start=False)
    writer.submit(1)

    assert writer.close(WAIT)
    assert writer.dropped == 1 and writer.pending == 0 and writer.drain(0.0)
    writer.start()  # closed: it never starts now
    assert not writer.started and writer.submit(2) is False


def test_a_writer_needs_exactly_one_handler_and_a_batch_only_with_handle_batch() -> None:
    with pytest.raises(ValueError, match="one of"):
        WriterThread(name="test-writer", queue_size=1)
    with pytest.raises(ValueError, match="one of"):
        WriterThread(lambda item: None, name="test-writer", queue_size=1, handle_batch=lambda batch: None)
    with pytest.raises(ValueError, match="batch_size"):
        WriterThread(lambda item: None, name="test-writer", queue_size=1, batch_size=2)
