"""Two daphne workers sharing Redis and one database: a change saved on one reaches the other within a second."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from concurrency.simulator.testing import free_port

httpx = pytest.importorskip("httpx")
redis = pytest.importorskip("redis")

PROJECT_DIR = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/1"
API_STATUS = "/api/v1/admin/concurrency/status"
API_SUMMARY = "/api/v1/admin/concurrency/summary"
CONSOLE = "/admin/concurrency/concurrencysettings/console/"
PASSWORD = "a-long-test-password-1"

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        pytest.skip("Redis does not answer on 127.0.0.1:6379")
    prefix = f"cc-workers-{uuid.uuid4().hex[:10]}"
    yield prefix
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()


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


class Worker:
    def __init__(self, env: dict[str, str], app: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), app]
        self.process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, timeout=5.0)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if self.http.get("/admin/login/").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        pytest.fail(f"daphne on port {self.port} did not start:\n{self.output()}")

    def login(self) -> None:
        page = self.http.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = self.http.post(
            "/admin/login/?next=/admin/",
            data={"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/"},
        )
        assert response.status_code == 302, response.text[:500]

    def status_path(self) -> str:
        return API_STATUS

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


@pytest.fixture
def two_workers(worker_env: dict[str, str]) -> Iterator[tuple[Worker, Worker]]:
    app = "chatbot.asgi:application"
    workers = (Worker(worker_env, app), Worker(worker_env, app))
    try:
        for worker in workers:
            worker.wait_ready()
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def poll(check, within: float, interval: float = 0.02):
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            return result
        time.sleep(interval)


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
    a.login()
    b.login()  # also B's first connection: its live-settings task starts here
    status_path = b.status_path()

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
