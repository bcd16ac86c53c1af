"""Two daphne workers sharing Redis and one database: a change saved on one reaches the other within a second."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daphne_workers import PROJECT_DIR, Worker, poll, redis_key_prefix, running_workers

REDIS_URL = "redis://127.0.0.1:6379/1"
API_STATUS = "/api/v1/admin/concurrency/status"
API_SUMMARY = "/api/v1/admin/concurrency/summary"
CONSOLE = "/admin/concurrency/concurrencysettings/console/"
PASSWORD = "a-long-test-password-1"

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    with redis_key_prefix(REDIS_URL, "cc-workers") as prefix:
        yield prefix


@pytest.fixture
def worker_env(redis_prefix: str) -> Iterator[dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="cc-workers-") as data_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbot.settings",
            "DATA_DIR": data_dir,
            "QDRANT_PATH": str(Path(data_dir) / "qdrant"),
            "REDIS_URL": REDIS_URL,
            "REDIS_PREFIX": redis_prefix,
            "DATABASE_URL": "",
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
            "PYTHONUNBUFFERED": "1",
        }
        manage = [sys.executable, str(PROJECT_DIR / "manage.py")]
        for command in (
            ["migrate", "--noinput"],
            ["createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.io"],
        ):
            subprocess.run([*manage, *command], cwd=PROJECT_DIR, env=env, check=True, capture_output=True, timeout=120)
        yield env


@pytest.fixture
def two_workers(worker_env: dict[str, str]) -> Iterator[tuple[Worker, ...]]:
    with running_workers([worker_env, worker_env]) as workers:
        yield workers


def settings_form(settings: dict, csrf: str, **changes) -> dict:
    data = {f"limit_{b}": n for b, n in settings["limits"].items()}
    data |= {f"rpm_{b}": n for b, n in settings["rpm"].items()}
    for name in (
        "starvation_threshold",
        "acquire_timeout",
        "max_waiters",
        "retry_max_attempts",
        "retry_base_seconds",
        "retry_max_seconds",
        "llm_request_timeout",
        "telemetry_sample_rate",
    ):
        data[name] = settings[name]
    if settings["priority_enabled"]:
        data["priority_enabled"] = "on"
    data |= {"expected_version": settings["version"], "csrfmiddlewaretoken": csrf}
    data.update(changes)
    return data


def test_a_limit_changed_on_one_worker_reaches_the_other_within_a_second(two_workers) -> None:
    a, b = two_workers
    a.login("ops", PASSWORD)
    b.login("ops", PASSWORD)  # also B's first connection: its live-settings task starts here
    status_path = API_STATUS

    # Both workers publish their stats through Redis: each lists the other.
    def both_listed(worker: Worker) -> bool:
        return len(worker.http.get(status_path).json()["workers"]) == 2

    assert poll(lambda: both_listed(a) and both_listed(b), within=5), "the workers do not see each other"
    before = b.http.get(status_path).json()
    old_limit = before["worker"]["manager"]["backends"]["chat"]["limit"]
    new_limit = old_limit + 5

    a.http.get(CONSOLE)
    response = a.http.post(
        CONSOLE, data=settings_form(before["settings"], a.http.cookies["csrftoken"], limit_chat=new_limit)
    )
    saved_at = time.monotonic()
    assert response.status_code == 302, response.text[:2000]

    def b_has_new_limit():
        return b.http.get(status_path).json()["worker"]["manager"]["backends"]["chat"]["limit"] == new_limit

    assert poll(b_has_new_limit, within=1.0), f"worker B still not at {new_limit} one second after the save"
    elapsed = time.monotonic() - saved_at
    assert elapsed < 1.0
    print(f"worker B applied the change {elapsed * 1000:.0f} ms after the save on worker A")

    # Both workers' published stats carry the new settings: the sums cover two workers at the new limit.
    def summed() -> dict:
        body = b.http.get(status_path).json()
        return body if body["summary"]["chat"]["limit"] == 2 * new_limit else {}

    body = poll(summed, within=2.0)
    assert body, "the summed limit never covered both workers"
    assert body["summary"]["chat"]["workers"] == 2
    assert {w["settings_version"] for w in body["workers"]} == {before["settings"]["version"] + 1}
    if status_path == API_STATUS:
        summary = b.http.get(API_SUMMARY).json()
        assert len(summary["workers"]) == 2
        assert summary["backends"]["chat"]["limit"] == 2 * new_limit
