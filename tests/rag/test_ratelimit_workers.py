"""Two real daphne workers behind one (pretend) proxy share the rate limit through Redis: 40 asks from one address,
without cookies, against a limit of 10 a minute."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.concurrency.cluster_redis import suite_redis_url
from tests.daphne_workers import Worker, manage, running_workers, worker_env

pytestmark = pytest.mark.slow

LIMIT = 10


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[Worker, ...]]:
    url = suite_redis_url("rate limits shared by workers")
    with (
        worker_env(
            "ratelimit-workers",
            redis_url=url,
            RAG_RATE_LIMIT_PER_MINUTE=str(LIMIT),
            RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE="0",
            RAG_TRUSTED_PROXY_HOPS="1",  # the test client plays the proxy: its X-Forwarded-For is trusted
        ) as env,
        running_workers([env, env]) as started,
    ):
        yield started


def ask(worker: Worker, forwarded_for: str, n: int) -> str:
    """One SSE ask without a cookie: "served" (an answer), "busy" (refused, 429), or what else happened."""
    with httpx.stream(
        "POST",
        worker.url + "/api/v1/rag/ask/stream_chat",
        json={"question": f"How do I reset my password? ({n})"},
        headers={"X-Forwarded-For": forwarded_for},
        timeout=30.0,
    ) as response:
        if response.status_code == 429:
            response.read()
            assert response.json()["error"]["code"] == "busy"
            return "busy"
        assert "set-cookie" in response.headers  # a new client every time: it never sends the cookie back
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    terminal = events[-1]
    if terminal["channel"] == "meta_summary":
        return "served"
    return f"{terminal['channel']}:{terminal.get('code')}"


def test_forty_asks_from_one_address_without_cookies_get_ten_a_minute_across_two_workers(
    workers: tuple[Worker, ...],
) -> None:
    started = time.monotonic()
    outcomes, served_at = [], []
    for n in range(40):
        outcome = ask(workers[n % 2], "203.0.113.7", n)
        outcomes.append(outcome)
        if outcome == "served":
            served_at.append(time.monotonic())
    elapsed = time.monotonic() - started
    print(f"\n40 asks in {elapsed:.1f} s: {outcomes.count('served')} served, {outcomes.count('busy')} busy")
    assert set(outcomes) <= {"served", "busy"}, outcomes
    assert outcomes[:LIMIT] == ["served"] * LIMIT  # the limit is not stricter than set
    # never more than LIMIT served within any minute
    assert all(later - earlier >= 60 for earlier, later in zip(served_at, served_at[LIMIT:], strict=False))
    if elapsed < 60:
        assert outcomes.count("served") == LIMIT


def test_the_address_is_the_trusted_hop_not_what_the_client_claims(workers: tuple[Worker, ...]) -> None:
    # runs after the forty: 203.0.113.7 has used its minute
    assert ask(workers[0], "198.51.100.9, 203.0.113.7", 100) == "busy"  # a made-up entry to the left changes nothing
    assert ask(workers[1], "198.51.100.2", 101) == "served"  # another address has its own window


def site_ask(worker: Worker, site_origin: str, visitor: str, n: int) -> tuple[str, str]:
    """One ask from a widget on `site_origin`: ("served" | "busy" | what else happened, the refusal's message)."""
    with httpx.stream(
        "POST",
        worker.url + "/api/v1/rag/ask/stream_chat",
        json={"question": f"How do I reset my password? (site {n})"},
        # every ask from its own address: the per-address limit above is not what this counts
        headers={"Origin": site_origin, "X-Client-Id": visitor, "X-Forwarded-For": f"192.0.2.{n + 1}"},
        timeout=30.0,
    ) as response:
        if response.status_code == 429:
            response.read()
            assert response.headers["access-control-allow-origin"] == site_origin  # the widget can read why
            return "busy", response.json()["error"]["message"]
        assert response.status_code == 200, response.read()
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    return ("served" if events[-1]["channel"] == "meta_summary" else events[-1]["channel"]), ""


def test_a_websites_daily_and_per_visitor_limits_hold_across_two_workers(workers: tuple[Worker, ...]) -> None:
    site_origin = "https://www.example.edu"
    manage(
        workers[0].env,
        *("sites", "add", "--name", "Example University", "--origin", site_origin),
        *("--daily-limit", "5", "--visitor-limit", "2"),
    )
    visitors = [uuid.uuid4().hex for _ in range(4)]  # client ids as the widget makes them
    # Each visitor's asks alternate between the workers: the third is refused, wherever it lands.
    first = [site_ask(workers[n % 2], site_origin, visitors[0], n) for n in range(3)]
    assert [outcome for outcome, _ in first] == ["served", "served", "busy"]
    assert "used up" in first[2][1]
    second = [site_ask(workers[(n + 1) % 2], site_origin, visitors[1], 10 + n) for n in range(2)]
    assert [outcome for outcome, _ in second] == ["served", "served"]
    # Four of the site's five are used: one more for a third visitor, then the site's day is over for everyone.
    assert site_ask(workers[0], site_origin, visitors[2], 20)[0] == "served"
    assert site_ask(workers[1], site_origin, visitors[2], 21)[0] == "busy"
    assert site_ask(workers[0], site_origin, visitors[3], 22)[0] == "busy"
