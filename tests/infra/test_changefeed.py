"""The change feed: a committed change bumps its topic's generation, and the watcher hands it to the handlers."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from django.db import transaction

from infra.changefeed import (
    ChangeWatcher,
    Registry,
    change_watch_start,
    change_watch_stop,
    feed_channel,
    feed_key,
    publish,
    publish_on_commit,
)
from infra.models import ChangeGeneration
from tests.daphne_workers import redis_key_prefix
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/1"


def generation(topic: str) -> int:
    return ChangeGeneration.objects.filter(topic=topic).values_list("generation", flat=True).first() or 0


async def ageneration(topic: str) -> int:
    return await asyncio.to_thread(generation, topic)


@pytest.fixture
def no_redis(settings) -> None:
    settings.REDIS_URL = ""


@pytest.fixture
def redis_prefix(settings) -> Iterator[str]:
    with redis_key_prefix(REDIS_URL, "feed-test") as prefix:
        settings.REDIS_URL = REDIS_URL
        settings.REDIS_PREFIX = prefix
        yield prefix


@pytest.fixture
async def watching(no_redis) -> AsyncIterator[tuple[Registry, ChangeWatcher]]:
    """This process's watcher, on a registry of the test's own (reads the table every 20 ms)."""
    registry = Registry()
    watcher = ChangeWatcher(registry=registry, poll_interval=0.02)
    assert change_watch_start(watcher) is watcher
    yield registry, watcher
    await change_watch_stop()


# --------------------------------------------------------------------------------------------- publishing


def test_a_committed_transaction_publishes_once_it_commits(no_redis) -> None:
    with transaction.atomic():
        publish_on_commit("t.commit")
        assert generation("t.commit") == 0  # not before the commit
    assert generation("t.commit") == 1
    publish("t.commit")
    assert generation("t.commit") == 2


def test_a_rolled_back_transaction_publishes_nothing(no_redis) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        publish_on_commit("t.rollback")
        raise RuntimeError("the change fails")
    assert generation("t.rollback") == 0
    assert not ChangeGeneration.objects.filter(topic="t.rollback").exists()


def test_publishing_with_redis_bumps_the_key_and_sends_a_notice(redis_prefix) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(feed_channel(redis_prefix))
    try:
        with transaction.atomic():
            publish_on_commit("t.redis")
        publish("t.redis")

        notices: list[bytes] = []
        deadline = time.monotonic() + 2
        while len(notices) < 2 and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.2)
            if message is not None:
                notices.append(message["data"])
        assert notices == [b"1 t.redis", b"2 t.redis"]
        assert client.get(feed_key(redis_prefix, "t.redis")) == b"2"
        assert generation("t.redis") == 2  # the table too: the truth for a worker that missed a notice
    finally:
        pubsub.close()
        client.close()


def test_publishing_without_a_database_table_row_or_redis_still_reaches_the_table(no_redis) -> None:
    ChangeGeneration.objects.create(topic="t.existing", generation=41)
    publish("t.existing")
    assert generation("t.existing") == 42


# --------------------------------------------------------------------------------------------- dispatch


async def test_the_watcher_runs_every_handler_once_at_start(watching) -> None:
    registry, _watcher = watching
    seen: list[str] = []

    async def first(topic: str) -> None:
        seen.append(f"first {topic}")

    registry.on_change("t.a", first)
    registry.on_change("t.b", lambda topic: seen.append(f"sync {topic}"))

    await until(lambda: len(seen) == 2, within=2)
    assert sorted(seen) == ["first t.a", "sync t.b"]


async def test_a_publish_in_this_process_is_dispatched_at_once(no_redis) -> None:
    registry = Registry()
    seen: list[str] = []
    registry.on_change("t.local", lambda topic: seen.append(topic))
    # The table is read once, at start: only the local dispatch can deliver a publish within the test.
    watcher = change_watch_start(ChangeWatcher(registry=registry, poll_interval=60))
    try:
        await until(lambda: seen == ["t.local"], within=2)

        await asyncio.to_thread(publish, "t.local")  # a sync view's thread, after its commit

        await until(lambda: seen == ["t.local", "t.local"], within=1)
        assert watcher is not None and watcher.table_reads == 1
    finally:
        await change_watch_stop()


async def test_a_change_by_another_process_arrives_through_the_table(watching) -> None:
    registry, watcher = watching
    seen: list[str] = []
    registry.on_change("t.other", lambda topic: seen.append(topic))
    await until(lambda: seen == ["t.other"], within=2)

    # Another process published: the row moved, nothing in this process was told.
    await ChangeGeneration.objects.aupdate_or_create(topic="t.other", defaults={"generation": 7})

    await until(lambda: seen == ["t.other", "t.other"], within=1)
    reads = watcher.table_reads
    await until(lambda: watcher.table_reads >= reads + 3, within=2)  # several reads later
    assert seen == ["t.other", "t.other"]  # the same generation is not dispatched again


async def test_a_crashing_handler_is_logged_and_the_others_still_run(watching, caplog) -> None:
    registry, watcher = watching
    seen: list[str] = []

    def broken(topic: str) -> None:
        raise RuntimeError("boom")

    registry.on_change("t.crash", broken)
    registry.on_change("t.crash", lambda topic: seen.append(topic))
    await until(lambda: seen == ["t.crash"] and watcher.failures >= 1, within=2)

    await asyncio.to_thread(publish, "t.crash")

    await until(lambda: seen == ["t.crash", "t.crash"], within=1)
    assert "broken for 't.crash' failed" in caplog.text
    assert "boom" in caplog.text


async def test_a_failed_handler_runs_again_without_a_new_change(no_redis) -> None:
    registry = Registry()
    calls: list[str] = []

    async def flaky(topic: str) -> None:
        calls.append(topic)
        if len(calls) < 3:
            raise ConnectionError("the database blinked")

    registry.on_change("t.retry", flaky)
    watcher = change_watch_start(ChangeWatcher(registry=registry, poll_interval=60, retry_delay=0.05))
    try:
        await until(lambda: len(calls) == 3, within=2)  # once at start, then twice more, nothing published
        await asyncio.sleep(0.3)  # a negative check, a fixed sleep: no run after the one that took the change in
        assert len(calls) == 3
        assert watcher is not None and watcher.failures == 2
    finally:
        await change_watch_stop()


async def test_a_handler_past_its_timeout_is_given_up_and_others_still_run(watching, caplog) -> None:
    registry, watcher = watching
    seen: list[str] = []
    started = asyncio.Event()

    async def hangs(topic: str) -> None:
        started.set()
        await asyncio.sleep(60)

    registry.on_change("t.slow", hangs, timeout=0.1)
    registry.on_change("t.quick", lambda topic: seen.append(topic))
    await until(lambda: watcher.failures >= 1, within=2)
    assert started.is_set()
    assert "hangs for 't.slow' timed out after 0.1 s" in caplog.text

    await asyncio.to_thread(publish, "t.quick")
    await until(lambda: seen == ["t.quick", "t.quick"], within=1)


async def test_a_sync_handler_past_its_timeout_is_reported_and_never_runs_twice_at_once(watching, caplog) -> None:
    registry, watcher = watching
    release = threading.Event()
    running: list[int] = []
    overlaps: list[int] = []

    def slow(topic: str) -> None:
        if running:
            overlaps.append(1)
        running.append(1)
        try:
            release.wait(5)
        finally:
            running.pop()

    registry.on_change("t.thread", slow, timeout=0.05)
    await until(lambda: watcher.failures >= 1 and running, within=2)
    await asyncio.to_thread(publish, "t.thread")  # arrives while the first run is still in its thread
    await asyncio.to_thread(publish, "t.thread")
    reads = watcher.table_reads
    await until(lambda: watcher.table_reads >= reads + 2, within=2)  # a read begun after the publishes: seen
    assert watcher.dispatched["t.thread"] == 1
    assert "slow for 't.thread' still runs after 0.05 s" in caplog.text

    release.set()
    await until(lambda: watcher.dispatched["t.thread"] >= 2 and not running, within=2)  # then it runs again
    assert overlaps == []


async def test_stop_cancels_the_watcher_and_a_running_handler(no_redis) -> None:
    registry = Registry()
    cancelled = asyncio.Event()

    async def long(topic: str) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    registry.on_change("t.stop", long, timeout=120)
    watcher = change_watch_start(ChangeWatcher(registry=registry, poll_interval=0.02))
    assert watcher is not None
    await until(lambda: watcher.dispatched["t.stop"] == 1, within=2)

    started = time.monotonic()
    await change_watch_stop()

    assert cancelled.is_set()
    assert time.monotonic() - started < 2


# --------------------------------------------------------------------------------------------- with Redis


async def test_with_redis_a_notice_is_dispatched_without_reading_the_table(redis_prefix) -> None:
    registry = Registry()
    seen: list[str] = []
    registry.on_change("t.notice", lambda topic: seen.append(topic))
    watcher = ChangeWatcher(
        registry=registry, redis_url=REDIS_URL, prefix=redis_prefix, safety_interval=60, redis_check_interval=60
    )
    change_watch_start(watcher)
    try:
        await until(lambda: watcher.listening and seen == ["t.notice"], within=3)
        reads = watcher.table_reads

        # Published by another worker: the table moves and a notice goes out; nothing dispatches here directly.
        await asyncio.to_thread(ChangeGeneration.objects.create, topic="t.notice", generation=1)
        client = __import__("redis").Redis.from_url(REDIS_URL)
        try:
            await asyncio.to_thread(client.publish, feed_channel(redis_prefix), "1 t.notice")
        finally:
            client.close()

        await until(lambda: seen == ["t.notice", "t.notice"], within=1)
        assert watcher.table_reads == reads
    finally:
        await change_watch_stop()


async def test_with_redis_a_lost_notice_is_caught_by_the_generation_check(redis_prefix) -> None:
    import redis

    registry = Registry()
    seen: list[str] = []
    registry.on_change("t.lost", lambda topic: seen.append(topic))
    client = redis.Redis.from_url(REDIS_URL)
    client.set(feed_key(redis_prefix, "t.lost"), 3)
    watcher = ChangeWatcher(
        registry=registry, redis_url=REDIS_URL, prefix=redis_prefix, safety_interval=60, redis_check_interval=0.1
    )
    change_watch_start(watcher)
    try:
        await until(lambda: watcher.listening and seen == ["t.lost"], within=3)
        await until(lambda: watcher.redis_checks >= 1, within=3)  # the key was read at least once

        await asyncio.to_thread(client.incr, feed_key(redis_prefix, "t.lost"))  # bumped, but no notice

        await until(lambda: seen == ["t.lost", "t.lost"], within=1)
    finally:
        client.close()
        await change_watch_stop()
