"""A stream whose worker is killed (SIGKILL) mid-answer, resumed on another worker through Redis: the client gets
the events it missed and then exactly one terminal event, `unavailable` with `retry_after`, within seconds.

Two real daphne workers share a database and the suite's Redis; the answer comes slowly from the LLM simulator,
so it is still streaming when its worker dies. Runs in the Redis run of CI (`REDIS_URL` set), skips without it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from devtools.simulator.testing import SimulatorProcess
from tests.daphne_workers import Worker, running_workers, worker_env
from tests.llm_simulator import simulator_view
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

TERMINALS = ("meta_summary", "error")


@pytest.fixture(scope="module")
def pair(suite_simulator: SimulatorProcess) -> Iterator[tuple[Worker, Worker]]:
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url:
        pytest.skip("a resume on another worker goes through Redis: runs with REDIS_URL set (the Redis run of CI)")
    # about 25 s of answer: it is mid-stream whenever the kill comes
    simulator = simulator_view(suite_simulator, {"tpot_ms": 100, "output_tokens": 250, "ttft_ms": 50})
    with (
        worker_env(
            "resume-workers",
            llm_base_url=simulator.base_url,
            redis_url=redis_url,
            RAG_SEMANTIC_CACHE_ENABLED="false",
        ) as env,
        running_workers([env, env]) as (first, second),
    ):
        yield first, second


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


def last_mirrored_seq(worker: Worker, request_id: str) -> int:
    """The seq of the last event of the stream in Redis (chatbot.replay.redis_store's list; 0: none yet)."""
    client = redis.Redis.from_url(worker.env["REDIS_URL"])
    try:
        raw = client.lindex(f"{worker.env['REDIS_PREFIX']}:chat:stream:{request_id}", -1)
    finally:
        client.close()
    return 0 if raw is None else int(json.loads(raw)["seq"])


def test_a_stream_resumes_on_another_worker_after_its_worker_is_killed(pair: tuple[Worker, Worker]) -> None:
    first, second = pair
    client = httpx.Client(timeout=30.0)  # carries the client cookie from the ask to the resume
    before: list[dict[str, Any]] = []
    with client.stream(
        "POST",
        first.url + "/api/v1/rag/ask/stream_chat",
        json={"question": "如何重設密碼？", "on_disconnect": "continue"},
    ) as response:
        assert response.status_code == 200, response.read()
        for event in sse_events(response):
            before.append(event)
            if sum(e["channel"] == "answer" for e in before) >= 5:
                break
    assert before[-1]["channel"] not in TERMINALS
    request_id = before[0]["request_id"]
    # once the relay has copied what was sent to Redis, kill the worker without a chance to say anything
    wait_for(lambda: last_mirrored_seq(first, request_id), lambda seq: seq >= before[-1]["seq"], within=10.0)
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    killed = time.monotonic()

    after: list[dict[str, Any]] = []
    with client.stream(
        "GET",
        second.url + f"/api/v1/rag/ask/stream/{request_id}",
        headers={"Last-Event-ID": str(before[-1]["seq"])},
    ) as response:
        assert response.status_code == 200, response.read()
        try:
            for event in sse_events(response):
                after.append(event)
        except httpx.ReadTimeout:
            pytest.fail(f"the resume stalled after {after[-1:]}:\n{second.output()}")
    ended = time.monotonic() - killed

    events = before + after
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), [e["seq"] for e in events]
    terminals = [e for e in events if e["channel"] in TERMINALS]
    assert terminals == [events[-1]], terminals
    assert events[-1]["channel"] == "error" and events[-1]["code"] == "unavailable", events[-1]
    assert events[-1]["retry_after"] >= 1
    # the dead worker's presence expires within 5 s; the reader checks every second
    assert ended < 10.0, f"the terminal event came {ended:.1f} s after the kill"
    # the other worker answers the question asked again
    with client.stream("POST", second.url + "/api/v1/rag/ask/stream_chat", json={"question": "hi"}) as response:
        assert response.status_code == 200
        again = list(sse_events(response))
    assert again[-1]["channel"] == "meta_summary", again[-1]
    client.close()
