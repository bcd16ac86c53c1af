"""The concurrency APIs: who may read them, and the shapes they return."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from chatbot.apikeys.services import api_key_create
from concurrency.live import register_stats_provider, worker_id
from concurrency.manager import get_manager
from concurrency.selectors import auxiliary_skipped_summary, workers_summary
from infra.access import SCOPE_READ
from tests.concurrency.manager_helpers import fresh_process_state
from tests.waiting import until

STATUS = "/api/v1/admin/concurrency/status"
SUMMARY = "/api/v1/admin/concurrency/summary"
PRIORITY = "/api/v1/admin/concurrency/priority"
ENDPOINTS = (STATUS, SUMMARY, PRIORITY)
TOKEN = "s3cret-token-for-scripts"
# What the seed's APIs return per backend.
SEED_KEYS = {"limit", "available", "in_progress", "waiting", "total_acquired", "total_released", "total_timeout"}
BACKEND_KEYS = {
    "limit",
    "available",
    "in_progress",
    "waiting",
    "total_acquired",
    "total_released",
    "total_timeout",
    "total_rejected",
    "wait_ms_p50",
    "wait_ms_p95",
    "wait_ms_p99",
    "max_wait_ms",
    "workers",
    "scope",
}


@pytest.fixture(autouse=True)
def process_state(settings) -> Iterator[None]:
    settings.REDIS_URL = ""  # one worker: this process
    with fresh_process_state():
        yield


# ---------------------------------------------------------------------------------------------- the views


@pytest.fixture
def staff(client) -> User:
    member = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(member)
    return member


pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.concurrency.urls")]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_anonymous_callers_get_403_json(client, url) -> None:
    response = client.get(url)

    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("url", ENDPOINTS)
def test_signed_in_users_who_are_not_staff_get_403(client, url) -> None:
    client.force_login(User.objects.create_user("visitor", password="pw"))

    assert client.get(url).status_code == 403


@pytest.mark.parametrize("url", ENDPOINTS)
def test_the_bearer_token_opens_the_apis_when_configured(client, settings, url) -> None:
    settings.CONCURRENCY_API_TOKEN = TOKEN

    assert client.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get(url, headers={"Authorization": "Bearer nope"}).status_code == 403


@pytest.mark.parametrize("url", ENDPOINTS)
def test_the_apis_go_through_the_shared_access_check(client, url) -> None:
    # an API key is one of the credentials of `infra.access`, tested there in full
    key = api_key_create(name="script", scopes=[SCOPE_READ]).secret
    chat_key = api_key_create(name="chat", scopes=["chat"]).secret

    assert client.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert client.get(url, headers={"Authorization": f"Bearer {chat_key}"}).status_code == 403


def test_no_token_works_while_the_setting_is_empty(client, settings) -> None:
    settings.CONCURRENCY_API_TOKEN = ""

    assert client.get(STATUS, headers={"Authorization": "Bearer "}).status_code == 403


def test_only_get_is_allowed(client, staff) -> None:
    assert client.post(STATUS).status_code == 405


def test_status_shape(client, staff) -> None:
    unregister = register_stats_provider("graph_cache", lambda: {"entries": 2})
    try:
        body = client.get(STATUS).json()
    finally:
        unregister()

    backends = {"default", "chat", "responses", "embedding"}
    top = {"worker", "settings", "redis", "cluster", "workers", "summary", "auxiliary_skipped", "server_time"}
    assert set(body) == top | backends
    assert body["cluster"] is None  # per-worker limits here (no Redis)
    for backend in backends:  # the seed's shape: `jq .chat.in_progress` works
        assert set(body[backend]) == SEED_KEYS
        assert body[backend] == {key: body["summary"][backend][key] for key in SEED_KEYS}
    worker = body["worker"]
    assert worker["worker_id"] == worker_id()
    assert set(worker) >= {"worker_id", "started_at", "updated_at", "settings_version", "manager", "extra"}
    assert worker["extra"] == {"graph_cache": {"entries": 2}}
    manager = worker["manager"]
    assert manager["mode"] in ("fifo", "priority")
    assert set(manager["backends"]) == {"default", "chat", "responses", "embedding"}
    assert set(manager["backends"]["chat"]) >= BACKEND_KEYS - {"workers", "scope"} | {"queue_head"}
    assert body["settings"]["version"] == 1
    assert set(body["settings"]["limits"]) == {"default", "chat", "responses", "embedding"}
    assert {"rpm", "retry_max_attempts", "telemetry_sample_rate", "llm_request_timeout"} <= set(body["settings"])
    assert body["redis"] is False
    assert [w["worker_id"] for w in body["workers"]] == [worker_id()]
    assert set(body["summary"]["chat"]) == BACKEND_KEYS


def test_a_failing_stats_provider_is_reported_not_fatal(client, staff) -> None:
    unregister = register_stats_provider("sampler", lambda: 1 / 0)
    try:
        body = client.get(STATUS).json()
    finally:
        unregister()

    assert "ZeroDivisionError" in body["worker"]["extra"]["sampler"]["error"]


def test_summary_shape(client, staff) -> None:
    body = client.get(SUMMARY).json()

    assert (body["total_in_progress"], body["total_waiting"]) == (0, 0)
    assert set(body["by_backend"]) == {"default", "chat", "responses", "embedding"}
    assert set(body["by_backend"]["chat"]) == SEED_KEYS
    assert body["workers"] == [worker_id()]
    assert set(body["backends"]) == {"default", "chat", "responses", "embedding"}
    assert set(body["backends"]["embedding"]) == BACKEND_KEYS
    assert body["backends"]["chat"]["available"] == body["backends"]["chat"]["limit"]


def test_priority_shape(client, staff) -> None:
    body = client.get(PRIORITY).json()

    assert body["mode"] == "fifo"
    assert body["priority_enabled"] is False
    assert isinstance(body["starvation_threshold"], float)
    assert set(body["queues"]) == {"default", "chat", "responses", "embedding"}
    assert body["queues"]["chat"] == {"waiting": 0, "queue_head": []}


async def test_queue_heads_show_waiting_requests_with_their_worker(async_client, settings) -> None:
    import asyncio

    from concurrency.context import request_scope
    from concurrency.manager import get_manager

    settings.CONCURRENCY_API_TOKEN = TOKEN
    manager = get_manager({"default": 1, "chat": 1, "responses": 1, "embedding": 1})
    async with manager.acquire("chat"):

        async def wait_in_line() -> None:
            with request_scope("req-42"):
                async with manager.acquire("chat", timeout=5):
                    pass

        waiter = asyncio.create_task(wait_in_line())
        await until(lambda: manager.stats()["backends"]["chat"]["waiting"] == 1)
        body = (await async_client.get(PRIORITY, headers={"Authorization": f"Bearer {TOKEN}"})).json()
    await waiter

    head = body["queues"]["chat"]["queue_head"]
    assert body["queues"]["chat"]["waiting"] == 1
    assert head[0]["request_id"] == "req-42"
    assert head[0]["priority"] == -1
    assert head[0]["worker_id"] == worker_id()


def test_summary_sums_over_workers_and_keeps_the_worst_wait() -> None:
    def worker(wid: str, in_progress: int, p95: float) -> dict:
        stats = {
            "limit": 4,
            "available": 4 - in_progress,
            "in_progress": in_progress,
            "waiting": 1,
            "total_acquired": 10,
            "total_released": 9,
            "total_timeout": 2,
            "total_rejected": 1,
            "wait_ms_p50": p95 / 2,
            "wait_ms_p95": p95,
            "wait_ms_p99": p95 * 2,
            "max_wait_ms": p95 * 3,
            "queue_head": [],
        }
        return {"worker_id": wid, "manager": {"backends": {"chat": stats}}}

    summary = workers_summary([worker("a:1", 3, 40.0), worker("b:2", 1, 250.0)])

    chat = summary["chat"]
    assert (chat["limit"], chat["in_progress"], chat["available"], chat["waiting"]) == (8, 4, 4, 2)
    assert (chat["total_acquired"], chat["total_timeout"], chat["total_rejected"]) == (20, 4, 2)
    assert chat["wait_ms_p95"] == 250.0
    assert chat["max_wait_ms"] == 750.0
    assert chat["workers"] == 2
    assert chat["scope"] == "worker"


def test_summary_of_a_cluster_wide_limit_counts_the_limit_once() -> None:
    def worker(wid: str, in_progress: int) -> dict:
        stats = {"limit": 4, "available": 0, "in_progress": in_progress, "waiting": 0}
        cluster = {"state": "redis", "backends": {"chat": {"limit": 4, "in_progress": 3}}}
        return {"worker_id": wid, "manager": {"backends": {"chat": stats}, "cluster": cluster}}

    chat = workers_summary([worker("a:1", 1), worker("b:2", 2)])["chat"]

    assert (chat["limit"], chat["in_progress"], chat["available"], chat["scope"]) == (4, 3, 1, "cluster")


def test_status_counts_skipped_auxiliary_calls_per_kind(client, staff) -> None:
    manager = get_manager()
    for kind in ("planner", "summary", "planner"):
        manager.auxiliary_skipped(kind)
    body = client.get(STATUS).json()
    assert body["auxiliary_skipped"] == {"planner": 2, "summary": 1}
    assert body["worker"]["manager"]["auxiliary_skipped"] == {"planner": 2, "summary": 1}


def test_skipped_auxiliary_calls_are_summed_over_workers() -> None:
    workers = [
        {"worker_id": "a", "manager": {"auxiliary_skipped": {"planner": 2}}},
        {"worker_id": "b", "manager": {"auxiliary_skipped": {"planner": 1, "summary": 4}}},
        {"worker_id": "c", "manager": {}},  # a worker from before the counter existed
    ]
    assert auxiliary_skipped_summary(workers) == {"planner": 3, "summary": 4}
