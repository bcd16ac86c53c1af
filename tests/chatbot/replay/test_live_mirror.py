"""The copy of a stream in Redis is written in batches, never a transaction per token, and the terminal event is
never held back (another worker's resume waits for it)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chatbot.replay import live
from chatbot.replay.live import LiveStream
from chatbot.replay.redis_store import RedisStreamStore
from rag.events import Event
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.waiting import until


class CountedStore(RedisStreamStore):
    """The real store on the suite's Redis, counting its writes."""

    appends = 0

    async def append(self, stream: LiveStream, events: list[Event], *, first: bool) -> None:
        self.appends += 1
        await super().append(stream, events, first=first)


@pytest.fixture
def store() -> Iterator[CountedStore]:
    url = suite_redis_url("the copy of streams in Redis")
    with fresh_prefix(url, "mirror") as prefix:
        yield CountedStore(url, prefix, retention_seconds=60, max_events=10_000)


def event(request_id: str, seq: int, channel: str = "answer") -> Event:
    fields: dict[str, Any] = {"request_id": request_id, "seq": seq, "channel": channel}
    fields |= {"delta": f"t{seq} "} if channel == "answer" else {"node": "telemetry"}
    return fields


async def stored(store: RedisStreamStore, request_id: str) -> list[dict[str, Any]]:
    events_key, _ = store._keys(request_id)
    return [json.loads(raw) for raw in await store._redis().lrange(events_key, 0, -1)]


async def test_tokens_are_written_in_batches_and_the_terminal_event_at_once(
    store: CountedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch window far longer than the test: only the first event and the terminal one may end a wait.
    monkeypatch.setattr(live, "MIRROR_BATCH_SECONDS", 30.0)
    request_id = uuid.uuid4().hex
    stream = LiveStream(request_id=request_id, client_id="anon:m", on_disconnect="continue", max_events=1000)
    mirror = asyncio.create_task(stream._mirror(store))

    stream.append(event(request_id, 1))
    await until(lambda: store.appends == 1)  # at once: its meta tells other workers the stream exists
    assert [e["seq"] for e in await stored(store, request_id)] == [1]
    for seq in range(2, 42):  # tokens arriving one by one, the loop turning between them
        stream.append(event(request_id, seq))
        await asyncio.sleep(0.002)
    stream.append(event(request_id, 42, "meta_summary"))

    await asyncio.wait_for(mirror, 10.0)  # the terminal event ends the wait: not the 30 s window
    assert [e["seq"] for e in await stored(store, request_id)] == list(range(1, 43))
    assert store.appends == 2  # the first event, then the other 41 in one write
    assert await store.owner(request_id) == "anon:m"
    await store._redis().aclose()
