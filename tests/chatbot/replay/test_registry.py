"""A resume on another worker waits (bounded) for the copy in Redis to reach the client's last event: the copy is
written in batches, so a client that read the live stream can be a batch ahead of it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from chatbot.replay import live, registry
from chatbot.replay.live import LiveStream, ResumeRefused
from chatbot.replay.registry import StreamRegistry
from tests.chatbot.replay.test_live_mirror import CountedStore, event, store  # noqa: F401 - fixture, used by name
from tests.waiting import until


async def test_a_resume_a_batch_ahead_of_the_copy_waits_for_it_and_one_beyond_the_stream_is_refused(
    store: CountedStore,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(live, "MIRROR_BATCH_SECONDS", 2.0)
    monkeypatch.setattr(registry, "REMOTE_CATCH_UP_SECONDS", 6.0)
    request_id = uuid.uuid4().hex
    stream = LiveStream(request_id=request_id, client_id="anon:r", on_disconnect="continue", max_events=1000)
    mirror = asyncio.create_task(stream._mirror(store))
    stream.append(event(request_id, 1))
    await until(lambda: store.appends == 1)
    stream.append(event(request_id, 2))
    stream.append(event(request_id, 3))  # held in the batch window: the copy has seq 1 only
    assert (await store.last_event(request_id) or {}).get("seq") == 1

    other_worker = StreamRegistry(store=store)
    resumption = await other_worker.resume(request_id, client_id="anon:r", after_seq=3)
    assert resumption.local is None and not resumption.complete
    monkeypatch.setattr(registry, "REMOTE_CATCH_UP_SECONDS", 0.5)  # the bound, shortened: nothing will come
    with pytest.raises(ResumeRefused, match="beyond stream"):
        await other_worker.resume(request_id, client_id="anon:r", after_seq=99)

    stream.append(event(request_id, 4, "meta_summary"))
    await asyncio.wait_for(mirror, 10.0)
    await store._redis().aclose()
