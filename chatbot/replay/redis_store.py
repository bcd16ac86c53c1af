"""The shared copy of recent streams in Redis, so a client that reconnects to another worker can resume.

Per request: a list `<prefix>:chat:stream:<request_id>` of the events as JSON, in seq order (the ring bound of
the local buffer applies with LTRIM), and a hash `<prefix>:chat:stream:<request_id>:meta` naming the client it
belongs to. Both expire `retention_seconds` after the last write. The worker running the answer writes
(`LiveStream._mirror`, batched); any worker reads (`RedisStreamStore.tail`, polling until the terminal event).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from chatbot import lifecycle
from chatbot.replay.live import ResumeRefused
from chatbot.streaming import transport_error_event
from concurrency.live.workers import worker_id, worker_key
from infra.redis_calls import redis_call
from rag.events import TERMINAL_CHANNELS, Event

if TYPE_CHECKING:
    from chatbot.replay.live import LiveStream

# Every Redis call is bounded: a slow Redis must not hold a transport or a pump for long.
REDIS_TIMEOUT_SECONDS = 1.0
# A reader on another worker looks for new events this often; only cross-worker resumes pay for it.
POLL_SECONDS = 0.2
# A reader that sees nothing new for this long asks whether the stream's worker is still alive (killed, it never
# writes the terminal event: the reader ends the stream with `unavailable` instead of waiting out the idle bound).
PRODUCER_CHECK_SECONDS = 1.0


def producer_gone_event(request_id: str, after_seq: int) -> Event:
    """The terminal event of a stream whose worker stopped mid-answer: ask again (another worker answers)."""
    event = transport_error_event(
        "unavailable",
        "the server answering this question stopped before it finished; please ask again",
        request_id=request_id,
        after_seq=after_seq,
    )
    event["retry_after"] = lifecycle.retry_after_seconds()
    return event


def _event_json(event: Event) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


class RedisStreamStore:
    def __init__(self, url: str, prefix: str, *, retention_seconds: float, max_events: int) -> None:
        self.url = url
        self.prefix = prefix
        self.retention_seconds = retention_seconds
        self.max_events = max_events
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _keys(self, request_id: str) -> tuple[str, str]:
        base = f"{self.prefix}:chat:stream:{request_id}"
        return base, base + ":meta"

    def _redis(self) -> Any:
        # redis.asyncio connections belong to the loop that opened them: one client per loop (a server has one;
        # a test run has one per test).
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            import redis.asyncio as aioredis  # heavy (~150 ms): paid only by a process with a Redis stream store

            self._client = aioredis.Redis.from_url(
                self.url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
            )
            self._client_loop = loop
        return self._client

    # --- writing (the worker running the answer) --------------------------------------------------------------

    async def append(self, stream: LiveStream, events: list[Event], *, first: bool) -> None:
        events_key, meta_key = self._keys(stream.request_id)
        ttl_ms = max(1, int(self.retention_seconds * 1000))
        async with self._redis().pipeline(transaction=True) as pipe:
            if first:
                meta = {"client_id": stream.client_id, "on_disconnect": stream.on_disconnect, "worker": worker_id()}
                pipe.hset(meta_key, mapping=meta)
            pipe.rpush(events_key, *(_event_json(event) for event in events))
            pipe.ltrim(events_key, -self.max_events, -1)
            pipe.pexpire(events_key, ttl_ms)
            pipe.pexpire(meta_key, ttl_ms)
            await redis_call(pipe.execute())

    async def discard(self, request_id: str) -> None:
        await redis_call(self._redis().delete(*self._keys(request_id)))

    # --- reading (any worker) ---------------------------------------------------------------------------------

    async def owner(self, request_id: str) -> str | None:
        """The client id the stream belongs to; None when Redis has no such stream (expired or never seen)."""
        value = await redis_call(self._redis().hget(self._keys(request_id)[1], "client_id"))
        return value.decode() if isinstance(value, bytes) else value

    async def producer_gone(self, request_id: str) -> bool:
        """Whether the worker writing the stream has stopped: it no longer shows among the live workers (each
        publishes its presence every half second with a few seconds' TTL, `concurrency.live.workers`) while this
        one does, which proves presence is published in this deployment. False whenever that cannot be told."""
        client = self._redis()
        producer = await redis_call(client.hget(self._keys(request_id)[1], "worker"))
        if producer is None:
            return False
        producer = producer.decode() if isinstance(producer, bytes) else str(producer)
        me = worker_id()
        if producer == me:
            return False
        async with client.pipeline(transaction=False) as pipe:
            pipe.exists(worker_key(self.prefix, producer))
            pipe.exists(worker_key(self.prefix, me))
            producer_alive, me_alive = await redis_call(pipe.execute())
        # Neither key: no presence is published here, so nothing can be told.
        return bool(me_alive) and not producer_alive

    async def last_event(self, request_id: str) -> Event | None:
        raw = await redis_call(self._redis().lindex(self._keys(request_id)[0], -1))
        return None if raw is None else json.loads(raw)

    async def events_after(self, request_id: str, after_seq: int) -> list[Event] | None:
        """Kept events with seq > after_seq (None: the stream has expired)."""
        client = self._redis()
        events_key = self._keys(request_id)[0]
        head = await redis_call(client.lindex(events_key, 0))
        if head is None:
            return None
        first = json.loads(head)["seq"]
        if after_seq + 1 < first:
            raise ResumeRefused(
                410,
                f"stream {request_id} is too long to resume from seq {after_seq}: "
                f"events before seq {first} are no longer kept",
            )
        events = [json.loads(raw) for raw in await redis_call(client.lrange(events_key, after_seq + 1 - first, -1))]
        if events and events[0]["seq"] != after_seq + 1:
            return []  # a trim moved the list between the two reads: the next poll starts from the new head
        return events

    async def tail(self, request_id: str, after_seq: int, *, idle_seconds: float) -> AsyncGenerator[Event, None]:
        """Events with seq > after_seq up to the terminal one, polling; ends with an `error` if the stream expires
        or shows nothing new for `idle_seconds` (its worker stopped writing)."""
        quiet_since = checked_at = time.monotonic()
        while True:
            events = await self.events_after(request_id, after_seq)
            if events is None:
                yield transport_error_event(
                    "bad_request", f"stream {request_id} expired", request_id=request_id, after_seq=after_seq
                )
                return
            for event in events:
                yield event
                after_seq = event["seq"]
                if event["channel"] in TERMINAL_CHANNELS:
                    return
            if events:
                quiet_since = checked_at = time.monotonic()
            elif time.monotonic() - checked_at > PRODUCER_CHECK_SECONDS:
                checked_at = time.monotonic()
                if await self.producer_gone(request_id):
                    yield producer_gone_event(request_id, after_seq)
                    return
            if not events and time.monotonic() - quiet_since > idle_seconds:
                message = f"no event from stream {request_id} for {idle_seconds:g} s"
                yield transport_error_event("timeout", message, request_id=request_id, after_seq=after_seq)
                return
            await asyncio.sleep(POLL_SECONDS)
