"""Live settings in one process: a saved change reaches the manager within a second, without a restart."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from channels.db import database_sync_to_async

from concurrency.live import (
    SETTINGS_TOPIC,
    SettingsSnapshot,
    StatsHeartbeat,
    live_settings_enabled,
    live_settings_preload,
    on_settings_applied,
    register_stats_provider,
    settings_apply,
    settings_current,
    settings_follow,
    settings_forget,
    worker_id,
    worker_stats_running,
    worker_stats_start,
    worker_stats_stop,
    worker_stats_task,
)
from concurrency.manager import get_manager, reset_manager
from concurrency.models import ConcurrencySettings
from concurrency.selectors import concurrency_settings_get
from concurrency.services import concurrency_settings_update
from infra.changefeed import ChangeWatcher, Registry, change_watch_start, change_watch_stop, feed_channel
from infra.models import ChangeGeneration
from infra.worker_tasks import WorkerTasksMiddleware
from tests.asgi_doubles import receive_unused, send_unused
from tests.concurrency.manager_helpers import fresh_process_state
from tests.waiting import until, until_async

REDIS_URL = "redis://127.0.0.1:6379/1"


@pytest.fixture(autouse=True)
def process_state() -> Iterator[None]:
    with fresh_process_state():
        yield


@pytest.fixture
async def watcher(settings) -> AsyncIterator[ChangeWatcher]:
    """This process's change feed watcher following the settings (and nothing else), the table read every 0.1 s."""
    settings.REDIS_URL = ""
    registry = Registry()
    registry.on_change(SETTINGS_TOPIC, settings_follow)
    started = change_watch_start(ChangeWatcher(registry=registry, poll_interval=0.1))
    assert started is not None
    yield started
    await change_watch_stop()


def current_version() -> int:
    current = settings_current()
    assert current is not None, "no settings applied yet"
    return current.version


def snapshot(version: int, **changes) -> SettingsSnapshot:
    base = {
        "version": version,
        "limits": {"default": 8, "chat": 8, "responses": 8, "embedding": 16},
        "priority_enabled": False,
        "starvation_threshold": 10.0,
        "acquire_timeout": 30.0,
        "max_waiters": 200,
    }
    return SettingsSnapshot(**{**base, **changes})


# --------------------------------------------------------------------------------------------- applying


def test_applying_a_snapshot_configures_the_manager_and_skips_older_ones() -> None:
    manager = get_manager()

    assert settings_apply(snapshot(3, limits={"chat": 2}, priority_enabled=True))
    assert not settings_apply(snapshot(2, limits={"chat": 5}))

    assert manager.limit("chat") == 2
    assert manager.mode == "priority"
    assert current_version() == 3
    assert settings_apply(snapshot(2, limits={"chat": 5}), force=True)
    assert manager.limit("chat") == 5


def test_a_snapshot_the_manager_refuses_leaves_the_old_settings() -> None:
    manager = get_manager()
    settings_apply(snapshot(1, limits={"chat": 4}))

    assert not settings_apply(snapshot(2, limits={"chat": 0}))

    assert manager.limit("chat") == 4
    assert current_version() == 1


def test_callbacks_get_every_applied_snapshot_and_the_current_one_on_registration() -> None:
    seen: list[SettingsSnapshot] = []
    settings_apply(snapshot(1, rpm={"chat": 60}))

    unregister = on_settings_applied(seen.append)
    settings_apply(snapshot(2, rpm={"chat": 120}, retry_max_attempts=3, telemetry_sample_rate=0.1))
    unregister()
    settings_apply(snapshot(3))

    assert [s.version for s in seen] == [1, 2]
    assert seen[1].rpm == {"chat": 120}
    assert seen[1].retry_max_attempts == 3
    assert seen[1].telemetry_sample_rate == 0.1


def test_a_failing_callback_does_not_stop_the_others_or_the_apply() -> None:
    seen: list[int] = []

    def broken(_: SettingsSnapshot) -> None:
        raise RuntimeError("boom")

    on_settings_applied(broken)
    on_settings_applied(lambda s: seen.append(s.version))

    assert settings_apply(snapshot(1, limits={"chat": 3}))
    assert seen == [1]
    assert get_manager().limit("chat") == 3


def test_snapshots_survive_the_json_round_trip() -> None:
    original = snapshot(7, rpm={"chat": 1}, updated_by="ops", updated_at="2025-01-01T00:00:00+00:00")

    assert SettingsSnapshot.from_json(original.to_json()) == original
    assert SettingsSnapshot.from_json(json.dumps({**original.to_dict(), "unknown": 1})) == original


@pytest.mark.django_db(transaction=True)
def test_start_up_applies_the_stored_row_before_the_watcher_starts() -> None:
    concurrency_settings_update(user=None, limit_chat=3, telemetry_sample_rate=0.2)
    settings_forget()  # as in a new process: the row is stored, nothing applied yet
    reset_manager()
    seen: list[float] = []
    on_settings_applied(lambda snapshot: seen.append(snapshot.telemetry_sample_rate))

    assert live_settings_preload()

    assert get_manager().limit("chat") == 3
    assert seen == [0.2]
    assert not live_settings_preload()  # once applied, the change feed keeps it in step


# --------------------------------------------------------------------------------------------- through the change feed


@pytest.mark.django_db(transaction=True)
async def test_the_watcher_applies_the_row_at_start(settings) -> None:
    await database_sync_to_async(concurrency_settings_update)(user=None, limit_chat=3)
    reset_manager()
    settings_forget()

    registry = Registry()
    registry.on_change(SETTINGS_TOPIC, settings_follow)
    settings.REDIS_URL = ""
    change_watch_start(ChangeWatcher(registry=registry))
    try:
        await until(lambda: get_manager().limit("chat") == 3, within=1.0)
        assert current_version() == 2
    finally:
        await change_watch_stop()


@pytest.mark.django_db(transaction=True)
async def test_a_saved_change_reconfigures_this_process_within_a_second(watcher) -> None:
    await until(lambda: settings_current() is not None, within=1.0)

    # The save runs on another thread, as in a sync view; the apply is handed to this loop.
    await database_sync_to_async(concurrency_settings_update)(user=None, limit_chat=2, priority_enabled=True)

    await until(lambda: get_manager().limit("chat") == 2 and get_manager().mode == "priority", within=1.0)


@pytest.mark.django_db(transaction=True)
async def test_a_change_saved_by_another_process_arrives_through_the_feed_table(watcher) -> None:
    await until(lambda: settings_current() is not None, within=1.0)

    # Another process saved and published: the row and its topic's generation moved, nothing here was told.
    await ConcurrencySettings.objects.filter(pk=1).aupdate(limit_embedding=5, version=9)
    await ChangeGeneration.objects.aupdate_or_create(topic=SETTINGS_TOPIC, defaults={"generation": 1000})

    elapsed = await until(lambda: get_manager().limit("embedding") == 5, within=1.0)
    assert current_version() == 9
    assert elapsed < 1.0


@pytest.mark.django_db(transaction=True)
async def test_a_lower_version_in_the_database_is_applied_too(watcher) -> None:
    await until(lambda: settings_current() is not None, within=1.0)
    settings_apply(snapshot(50, limits={"chat": 7}))

    # A restore: the database's version is lower than the one applied here, and it is the authority.
    await ConcurrencySettings.objects.filter(pk=1).aupdate(limit_chat=4, version=3)
    await ChangeGeneration.objects.aupdate_or_create(topic=SETTINGS_TOPIC, defaults={"generation": 2000})

    await until(lambda: get_manager().limit("chat") == 4, within=1.0)
    assert current_version() == 3


async def test_following_the_settings_can_be_switched_off(settings) -> None:
    settings.CONCURRENCY_LIVE_SETTINGS = False

    assert not live_settings_enabled()


# --------------------------------------------------------------------------------------------- the stats heartbeat


@pytest.mark.django_db(transaction=True)
async def test_the_asgi_wrapper_starts_the_heartbeat_on_the_first_connection_with_redis(redis_prefix, settings) -> None:
    settings.CONCURRENCY_LIVE_SETTINGS = True  # the suite's settings switch it off for other apps' tests
    calls: list[str] = []

    async def app(scope, receive, send) -> None:
        calls.append(scope["type"])

    wrapped = WorkerTasksMiddleware(app, [worker_stats_task])
    try:
        await wrapped({"type": "http"}, receive_unused, send_unused)
        await wrapped({"type": "websocket"}, receive_unused, send_unused)

        assert calls == ["http", "websocket"]
        assert worker_stats_running() is not None
    finally:
        await worker_stats_stop()


async def test_without_redis_there_is_no_heartbeat(settings) -> None:
    settings.CONCURRENCY_LIVE_SETTINGS = True
    settings.REDIS_URL = ""
    calls: list[str] = []

    async def app(scope, receive, send) -> None:
        calls.append(scope["type"])

    await WorkerTasksMiddleware(app, [worker_stats_task])({"type": "http"}, receive_unused, send_unused)

    assert calls == ["http"]
    assert worker_stats_running() is None


@pytest.mark.django_db(transaction=True)
async def test_the_asgi_wrapper_answers_lifespan_itself() -> None:
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    sent: list[dict] = []
    await inbox.put({"type": "lifespan.startup"})
    await inbox.put({"type": "lifespan.shutdown"})

    async def send(message: dict) -> None:
        sent.append(message)

    async def app(scope, receive, send) -> None:  # pragma: no cover - must not be called for lifespan
        raise AssertionError("lifespan reached the application")

    await WorkerTasksMiddleware(app, [worker_stats_task])({"type": "lifespan"}, inbox.get, send)

    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert worker_stats_running() is None


# --------------------------------------------------------------------------------------------- with Redis


@pytest.fixture
def redis_prefix(settings) -> Iterator[str]:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        pytest.skip("Redis does not answer on 127.0.0.1:6379")
    prefix = f"cc-test-{uuid.uuid4().hex[:10]}"
    settings.REDIS_URL = REDIS_URL
    settings.REDIS_PREFIX = prefix
    yield prefix
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()


@pytest.mark.django_db(transaction=True)
async def test_a_change_published_by_another_worker_is_applied_within_a_second(redis_prefix) -> None:
    import redis.asyncio as aioredis

    await database_sync_to_async(concurrency_settings_get)()
    registry = Registry()
    registry.on_change(SETTINGS_TOPIC, settings_follow)
    watcher = ChangeWatcher(registry=registry, redis_url=REDIS_URL, prefix=redis_prefix, safety_interval=60)
    change_watch_start(watcher)
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await until(lambda: settings_current() is not None and watcher.listening, within=3)
        reads = watcher.table_reads

        # Another worker saved (the row moved) and published: its notice is all this worker hears.
        await ConcurrencySettings.objects.filter(pk=1).aupdate(limit_chat=1, limit_default=2, version=5)
        await client.publish(feed_channel(redis_prefix), f"1 {SETTINGS_TOPIC}")

        await until(lambda: get_manager().limit("chat") == 1, within=1.0)
        assert watcher.table_reads == reads  # the notice did it, not the feed's table read
    finally:
        await client.aclose()
        await change_watch_stop()


@pytest.mark.django_db(transaction=True)
async def test_the_worker_publishes_its_stats_with_a_short_ttl_and_leaves_on_stop(redis_prefix) -> None:
    import redis.asyncio as aioredis

    unregister = register_stats_provider("graph_cache", lambda: {"size": 3})
    client = aioredis.Redis.from_url(REDIS_URL)
    key = f"{redis_prefix}:concurrency:workers:{worker_id()}"
    try:
        worker_stats_start(StatsHeartbeat(redis_url=REDIS_URL, prefix=redis_prefix))
        raw = await until_async(lambda: client.get(key), lambda value: value is not None, within=2.0)
        assert raw is not None
        published = json.loads(raw)
        assert published["worker_id"] == worker_id()
        assert set(published["manager"]["backends"]) >= {"default", "chat", "responses", "embedding"}
        assert published["extra"]["graph_cache"] == {"size": 3}  # other providers may be registered too
        assert 0 < await client.ttl(key) <= 5
        assert await client.zscore(f"{redis_prefix}:concurrency:workers", worker_id()) is not None

        await worker_stats_stop()

        assert await client.get(key) is None
        assert await client.zscore(f"{redis_prefix}:concurrency:workers", worker_id()) is None
    finally:
        unregister()
        await worker_stats_stop()
        await client.aclose()
