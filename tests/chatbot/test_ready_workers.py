"""A daphne worker's readiness follows its Redis and its PostgreSQL: 503 naming the part while it is down, 200 again
once it is back, with no restart. Both servers are private ones (tests/servers.py), really stopped and started."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daphne_workers import Worker, manage, running_workers
from tests.servers import PrivatePostgres, PrivateRedis
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parents[2] / "rag" / "corpus" / "demo"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[PrivateRedis, PrivatePostgres]]:
    redis, postgres = PrivateRedis(), PrivatePostgres()
    try:
        redis.start()
        postgres.start()
        yield redis, postgres
    finally:
        redis.stop()
        postgres.remove()


@pytest.fixture(scope="module")
def worker(servers: tuple[PrivateRedis, PrivatePostgres], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    redis, postgres = servers
    data_dir = tmp_path_factory.mktemp("ready-worker")
    shutil.copytree(DEMO, data_dir / "corpus")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(data_dir),
        "CORPUS_DIR": str(data_dir / "corpus"),
        "DATABASE_URL": postgres.url,
        "REDIS_URL": redis.url,
        "QDRANT_URL": "",
        "LLM_BASE_URL": "",
        "PYTHONUNBUFFERED": "1",
    }
    manage(env, "migrate", "--noinput")
    manage(env, "reindex")
    with running_workers([env]) as (started,):
        yield started


def ready(worker: Worker) -> tuple[int, dict[str, Any]]:
    try:
        response = worker.http.get("/api/v1/ready", timeout=10.0)
    except httpx.TransportError as exc:
        return 0, {"transport": repr(exc)}
    return response.status_code, response.json()


def failing(worker: Worker) -> list[str]:
    status, body = ready(worker)
    return [] if status == 200 else list(body.get("error", {}).get("failing", ["?"]))


def test_ready_names_redis_while_it_is_down_and_recovers(
    worker: Worker, servers: tuple[PrivateRedis, PrivatePostgres]
) -> None:
    redis, _ = servers
    wait_for(lambda: ready(worker), lambda got: got[0] == 200, within=20.0, interval=0.2, note=worker.output)
    stopped = time.monotonic()
    redis.stop()
    try:
        down = wait_for(lambda: failing(worker), within=10.0, interval=0.2)
        noticed = time.monotonic() - stopped
        assert down == ["channel_layer"], (down, ready(worker))
        assert "channel_layer:" in ready(worker)[1]["error"]["message"]
    finally:
        restarted = time.monotonic()
        redis.start()
    wait_for(lambda: ready(worker), lambda got: got[0] == 200, within=10.0, interval=0.2)
    print(f"Redis stopped: 503 {noticed:.1f} s later; restarted: 200 {time.monotonic() - restarted:.1f} s later")


def test_ready_names_the_database_while_it_is_down_and_recovers(
    worker: Worker, servers: tuple[PrivateRedis, PrivatePostgres]
) -> None:
    _, postgres = servers
    wait_for(lambda: ready(worker), lambda got: got[0] == 200, within=20.0, interval=0.2, note=worker.output)
    stopped = time.monotonic()
    postgres.stop()
    try:
        down = wait_for(lambda: failing(worker), within=10.0, interval=0.2)
        noticed = time.monotonic() - stopped
        assert down == ["database"], (down, ready(worker))
    finally:
        restarted = time.monotonic()
        postgres.start()
    wait_for(lambda: ready(worker), lambda got: got[0] == 200, within=10.0, interval=0.2)
    print(f"PostgreSQL stopped: 503 {noticed:.1f} s later; restarted: 200 {time.monotonic() - restarted:.1f} s later")
