"""The writer merges text deltas into frames: nothing lost, order kept, the first delta at once, one terminal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rag.events import Coalescing, Event, EventChannel, StreamWriter
from tests.fake_clock import FakeClock


class ManualTimers:
    """`call_later` for the writer: the test fires the timer itself."""

    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Callable[[], None], Handle]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = Handle()
        self.scheduled.append((delay, callback, handle))
        return handle

    def fire(self) -> float:
        delay, callback, handle = self.scheduled.pop()
        assert not handle.cancelled
        callback()
        return delay


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def drain(channel: EventChannel) -> list[Event]:
    items: Any = channel._items  # the test reads what the channel holds without an event loop turn
    out = list(items)
    items.clear()
    return out


def make(window: float = 0.04, max_chars: int = 256) -> tuple[StreamWriter, EventChannel, FakeClock, ManualTimers]:
    channel = EventChannel(max_pending=64)
    clock, timers = FakeClock(start=100.0), ManualTimers()
    writer = StreamWriter("r1", channel, coalescing=Coalescing(window, max_chars), clock=clock, call_later=timers)
    return writer, channel, clock, timers


def deltas(events: list[Event]) -> list[str]:
    return [e["delta"] for e in events if e["channel"] == "answer"]


async def test_the_first_delta_goes_out_at_once_and_the_next_ones_wait_for_the_window() -> None:
    writer, channel, clock, timers = make()
    await writer.answer("synth", "Hel")
    assert deltas(drain(channel)) == ["Hel"]
    await writer.answer("synth", "lo")
    await writer.answer("synth", ", wor")
    assert drain(channel) == []
    assert timers.scheduled[0][0] == pytest.approx(0.04)  # due one window after the frame that went out
    clock.now += 0.04
    await writer.answer("synth", "ld")  # the window has passed: everything waiting goes as one frame
    events = drain(channel)
    assert deltas(events) == ["lo, world"]
    assert [e["seq"] for e in events] == [2]


async def test_a_timer_sends_what_waits_when_no_further_delta_comes() -> None:
    writer, channel, clock, timers = make()
    await writer.answer("synth", "a")
    await writer.answer("synth", "b")
    await writer.answer("synth", "c")
    drain(channel)
    clock.now += 0.04
    timers.fire()
    assert deltas(drain(channel)) == ["bc"]
    assert timers.scheduled == []


async def test_max_chars_sends_a_frame_before_the_window() -> None:
    writer, channel, _clock, timers = make(max_chars=5)
    await writer.answer("synth", "x")
    await writer.answer("synth", "abc")
    assert deltas(drain(channel)) == ["x"]
    await writer.answer("synth", "de")
    assert deltas(drain(channel)) == ["abcde"]
    assert timers.scheduled[0][2].cancelled  # the frame went out: its timer is not needed any more


async def test_other_events_and_the_terminal_keep_the_order_of_the_emits() -> None:
    writer, channel, _clock, _timers = make()
    await writer.answer("synth", "one")
    await writer.answer("synth", " two")
    await writer.reasoning("synth", "why")  # another channel: the answer text waiting goes first
    await writer.reasoning("synth", " so")
    await writer.status("synth", "end")
    await writer.answer("synth", " three")
    await writer.answer("synth", " four")
    writer.finish({"cached": False})
    events = drain(channel)
    assert [(e["channel"], e.get("delta", e["stage"])) for e in events] == [
        ("answer", "one"),
        ("answer", " two"),
        ("reasoning", "why so"),
        ("status", "end"),
        ("answer", " three four"),
        ("meta_summary", "final"),
    ]
    assert [e["seq"] for e in events] == list(range(1, 7))
    assert channel.closed


async def test_nothing_is_lost_and_one_terminal_ends_the_stream_when_it_fails() -> None:
    writer, channel, clock, timers = make()
    text = [f"w{i} " for i in range(50)]
    for i, piece in enumerate(text):
        clock.now += 0.013 * (i % 3)
        await writer.answer("synth", piece)
    writer.fail("upstream_error", "the model went away")
    writer.fail("cancelled", "a second terminal is ignored")
    events = drain(channel)
    assert "".join(deltas(events)) == "".join(text)
    assert len(deltas(events)) < len(text)
    assert [e["channel"] for e in events].count("error") == 1
    assert events[-1]["code"] == "upstream_error"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    # The terminal cancelled the timers; one that fires all the same sends nothing.
    assert timers.scheduled
    assert all(handle.cancelled for _delay, _callback, handle in timers.scheduled)
    for _delay, callback, _handle in timers.scheduled:
        callback()
    assert drain(channel) == []


async def test_a_delta_after_a_quiet_window_goes_out_at_once() -> None:
    writer, channel, clock, _timers = make(window=0.05)
    await writer.answer("synth", "a")
    clock.now += 0.2
    await writer.answer("synth", "b")
    assert deltas(drain(channel)) == ["a", "b"]


async def test_the_timer_leaves_the_text_waiting_while_the_reader_is_behind() -> None:
    channel = EventChannel(max_pending=2)
    clock, timers = FakeClock(start=100.0), ManualTimers()
    writer = StreamWriter("r1", channel, coalescing=Coalescing(0.04, 256), clock=clock, call_later=timers)
    await writer.status("synth", "start")
    await writer.answer("synth", "a")
    await writer.answer("synth", "b")  # waits; the channel holds two events: full
    clock.now += 0.04
    timers.fire()
    assert len(drain(channel)) == 2  # the bound held: "b" still waits
    writer.finish({})
    assert [e.get("delta") for e in drain(channel)] == ["b", None]


async def test_without_coalescing_every_delta_is_an_event() -> None:
    channel = EventChannel()
    writer = StreamWriter("r1", channel, coalescing=Coalescing(0.0, 256))
    for piece in ("a", "b", "c"):
        await writer.answer("synth", piece)
    assert deltas(drain(channel)) == ["a", "b", "c"]
