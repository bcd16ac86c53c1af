"""Which streams this process keeps, for how long, and who may resume them.

Retention: a stream is kept while it runs and `retention_seconds` after its terminal event. In memory by
default; with Redis (`REDIS_URL`) the events are also copied there, Redis keeps them for the window (so any
worker can serve a resume) and this process lets its own copy go shortly after the copy is complete. Bounds:
`max_events` per stream (a ring) and `max_streams` finished streams in memory (the oldest go first; running
ones are never dropped, and their number is bounded by the LLM concurrency limits anyway).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from chatbot.replay.live import MIRROR_BATCH_SECONDS, LiveStream, ResumeRefused
from chatbot.replay.redis_store import RedisStreamStore
from chatbot.streaming import ChatExchange
from rag.events import TERMINAL_CHANNELS, Event

# With Redis holding the window, the local copy of a finished stream is kept only this long after Redis has all
# of it (a resume on this worker then reads Redis like any other).
LOCAL_GRACE_SECONDS = 10.0
# A resume served from Redis gives up when its stream shows nothing new for this long (its worker went away).
REMOTE_IDLE_SECONDS = 60.0
# The copy in Redis is written in batches (`live.MIRROR_BATCH_SECONDS`), so a client that read the live stream up to
# its last event and comes back on another worker can be a batch ahead of the copy: its resume waits this long for
# the copy to reach its last seq before it is refused as beyond the stream.
REMOTE_CATCH_UP_SECONDS = 1.0


@dataclass(slots=True)
class Resumption:
    """A resume that was accepted: the missed events (live until the terminal one) and, when the answer runs in
    this process, its stream (for cancel and the disconnect policy)."""

    request_id: str
    events: AsyncGenerator[Event, None]
    local: LiveStream | None
    complete: bool  # the client has the terminal event already: there is nothing to send


class StreamRegistry:
    def __init__(
        self,
        *,
        retention_seconds: float = 300.0,
        max_events: int = 10_000,
        max_streams: int = 1_000,
        store: RedisStreamStore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retention_seconds = retention_seconds
        self.max_events = max_events
        self.max_streams = max_streams
        self.store = store
        self._clock = clock
        self._streams: dict[str, LiveStream] = {}  # insertion order: oldest first

    def open(self, exchange: ChatExchange, *, on_disconnect: str) -> LiveStream:
        """Start relaying an exchange's events; the stream runs whether or not a transport reads it."""
        self._sweep()
        stream = LiveStream(
            request_id=exchange.request_id,
            client_id=exchange.ask.client_id,
            on_disconnect=on_disconnect,
            max_events=self.max_events,
        )
        self._streams[stream.request_id] = stream
        stream.start(exchange, mirror=self.store)
        return stream

    def local(self, request_id: str) -> LiveStream | None:
        """The stream of this process, if it is still kept."""
        self._sweep()
        return self._streams.get(request_id)

    def running(self) -> list[LiveStream]:
        """This process's streams that have not ended yet."""
        return [stream for stream in self._streams.values() if stream.running]

    def _kept_for(self, stream: LiveStream) -> float:
        if self.store is None or stream.mirror_failed or stream.mirrored_seq < stream.last_seq:
            return self.retention_seconds
        return min(self.retention_seconds, LOCAL_GRACE_SECONDS)

    def _sweep(self) -> None:
        now = self._clock()
        for request_id, stream in list(self._streams.items()):
            if stream.finished_at is not None and now - stream.finished_at > self._kept_for(stream):
                del self._streams[request_id]
        excess = len(self._streams) - self.max_streams
        if excess > 0:
            finished = [rid for rid, stream in self._streams.items() if stream.finished_at is not None]
            for request_id in finished[:excess]:
                del self._streams[request_id]

    async def resume(self, request_id: str, *, client_id: str, after_seq: int) -> Resumption:
        """What a client that has seen events 1..after_seq of `request_id` missed. Raises ResumeRefused."""
        stream = self.local(request_id)
        if stream is not None:
            self._check_owner(request_id, stream.client_id, client_id)
            if after_seq > stream.last_seq:
                raise ResumeRefused(
                    400, f"last seq {after_seq} is beyond stream {request_id}'s last event ({stream.last_seq})"
                )
            complete = stream.terminal is not None and after_seq >= stream.terminal["seq"]
            stream.events_after(after_seq)  # refuses now (not mid-stream) when the events are gone
            return Resumption(request_id, stream.tail(after_seq), stream, complete)
        if self.store is not None:
            owner = await self.store.owner(request_id)
            if owner is not None:
                self._check_owner(request_id, owner, client_id)
                last = await self._stored_up_to(self.store, request_id, after_seq)
                if last is not None:
                    if after_seq > last["seq"]:
                        raise ResumeRefused(
                            400, f"last seq {after_seq} is beyond stream {request_id}'s last event ({last['seq']})"
                        )
                    complete = last["channel"] in ("meta_summary", "error") and after_seq >= last["seq"]
                    events = self.store.tail(request_id, after_seq, idle_seconds=REMOTE_IDLE_SECONDS)
                    return Resumption(request_id, events, None, complete)
        raise self._unknown(request_id)

    @staticmethod
    async def _stored_up_to(store: RedisStreamStore, request_id: str, after_seq: int) -> Event | None:
        """The copy's last event, once it has `after_seq` or the stream's end, or when `REMOTE_CATCH_UP_SECONDS` have
        passed (then a resume from beyond it is refused); None when Redis has no copy."""
        deadline = time.monotonic() + REMOTE_CATCH_UP_SECONDS
        while True:
            last = await store.last_event(request_id)
            caught_up = last is None or last["seq"] >= after_seq or last["channel"] in TERMINAL_CHANNELS
            if caught_up or time.monotonic() >= deadline:
                return last
            await asyncio.sleep(MIRROR_BATCH_SECONDS)

    def _unknown(self, request_id: str) -> ResumeRefused:
        return ResumeRefused(
            410,
            f"stream {request_id} expired or is unknown: events are kept for {self.retention_seconds:g} s "
            "after an answer ends",
        )

    def _check_owner(self, request_id: str, owner: str, client_id: str) -> None:
        # Another client's stream is answered as an unknown one: a resume must not reveal that an id exists.
        if owner != client_id:
            raise self._unknown(request_id)
