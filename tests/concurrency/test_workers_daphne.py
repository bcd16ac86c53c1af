"""Two daphne workers sharing Redis and one database: a change saved on one reaches the other within a second."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from tests.daphne_workers import Worker, manage, running_workers, worker_env
from tests.waiting import poll, wait_for

REDIS_URL = "redis://127.0.0.1:6379/1"
API_STATUS = "/api/v1/admin/concurrency/status"
API_SUMMARY = "/api/v1/admin/concurrency/summary"
CONSOLE = "/admin/concurrency/concurrencysettings/console/"
PASSWORD = "a-long-test-password-1"
INITIAL_STATUS = re.compile(r'<script id="concurrency-initial-status" type="application/json">(.*?)</script>', re.S)

pytestmark = pytest.mark.slow


# One pair of workers for the module: starting them (migrate, two daphnes) takes far longer than the tests.
@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    with worker_env("cc-workers", redis_url=REDIS_URL, prepare=False, DJANGO_SUPERUSER_PASSWORD=PASSWORD) as env:
        manage(env, "migrate", "--noinput")  # no index: these tests ask nothing
        manage(env, "createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.io")
        yield env


@pytest.fixture(scope="module")
def two_workers(env: dict[str, str]) -> Iterator[tuple[Worker, ...]]:
    """Both logged in as staff; the login is also each worker's first connection, which starts its live-settings
    task."""
    with running_workers([env, env]) as workers:
        for worker in workers:
            worker.login("ops", PASSWORD)
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


def settings_handled(worker: Worker) -> int:
    """How many times this worker's change feed watcher ran the settings handler."""
    feed = worker.http.get(API_STATUS).json()["worker"]["extra"]["change_feed"]
    return int(feed["dispatched"].get("concurrency.settings", 0))


def chat_limit(worker: Worker) -> int:
    return int(worker.http.get(API_STATUS).json()["worker"]["manager"]["backends"]["chat"]["limit"])


def test_a_limit_changed_on_one_worker_reaches_both_within_a_second(two_workers) -> None:
    a, b = two_workers

    # Both workers publish their stats through Redis: each lists the other.
    def both_listed(worker: Worker) -> bool:
        return len(worker.http.get(API_STATUS).json()["workers"]) == 2

    wait_for(lambda: both_listed(a) and both_listed(b), within=5, note="the workers do not see each other")
    before = b.http.get(API_STATUS).json()
    handled_before = {name: settings_handled(worker) for name, worker in (("A", a), ("B", b))}
    new_limit = before["worker"]["manager"]["backends"]["chat"]["limit"] + 5

    a.http.get(CONSOLE)
    response = a.http.post(
        CONSOLE, data=settings_form(before["settings"], a.http.cookies["csrftoken"], limit_chat=new_limit)
    )
    saved_at = time.monotonic()
    assert response.status_code == 302, response.text[:2000]

    # Each worker on its own clock: A applies its own save, B hears of it through Redis.
    applied_after: dict[str, float] = {}

    def both_applied() -> bool:
        for name, worker in (("A", a), ("B", b)):
            if name not in applied_after and chat_limit(worker) == new_limit:
                applied_after[name] = time.monotonic() - saved_at
        return len(applied_after) == 2

    poll(both_applied, within=1.0)
    for name in ("A", "B"):
        assert name in applied_after, f"worker {name} still not at {new_limit} one second after the save"
        assert applied_after[name] < 1.0
    times = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in applied_after.items())
    print(f"applied after the save on worker A: {times}")
    # Through the change feed: each worker's one watcher ran the settings handler for the change.
    for name, worker in (("A", a), ("B", b)):
        assert settings_handled(worker) > handled_before[name], f"worker {name}'s change feed did not carry it"

    # Both workers' published stats carry the new settings. With Redis the limit is the cluster's, set once: both
    # workers draw from it, so it is shown once, not summed over them.
    def both_at_the_new_limit() -> dict:
        body = b.http.get(API_STATUS).json()
        versions = {w["settings_version"] for w in body["workers"]}
        settled = body["summary"]["chat"]["workers"] == 2 and versions == {before["settings"]["version"] + 1}
        return body if settled and body["summary"]["chat"]["limit"] == new_limit else {}

    body = wait_for(both_at_the_new_limit, within=2.0, note="the two workers' stats never showed the new cluster limit")
    assert body["summary"]["chat"]["workers"] == 2
    assert {w["settings_version"] for w in body["workers"]} == {before["settings"]["version"] + 1}
    summary = b.http.get(API_SUMMARY).json()
    assert len(summary["workers"]) == 2
    assert summary["backends"]["chat"]["limit"] == new_limit


def test_the_console_shows_both_workers(two_workers) -> None:
    a, b = two_workers
    ids = {worker.http.get(API_STATUS).json()["worker"]["worker_id"] for worker in (a, b)}
    assert len(ids) == 2

    def console_listing_both() -> dict:
        page = a.http.get(CONSOLE)
        assert page.status_code == 200, page.text[:500]
        match = INITIAL_STATUS.search(page.text)
        assert match, "the console embeds no initial status"
        status = json.loads(match.group(1))
        return {"page": page.text, "status": status} if len(status["workers"]) == 2 else {}

    seen = wait_for(console_listing_both, within=5, note="the console of worker A never listed two workers")
    assert {w["worker_id"] for w in seen["status"]["workers"]} == ids
    assert seen["status"]["summary"]["chat"]["workers"] == 2
    assert '<strong data-cc="workers">2</strong>' in seen["page"]
