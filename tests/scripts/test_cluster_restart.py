"""A rolling restart of every worker behind nginx, under 50 live answers and a stream of new asks: no stream is
lost (each gets its answer or a terminal event, and a client whose stream broke resumes through nginx on another
worker) and no new ask fails (nginx retries what a draining or stopped worker refuses on the next one).

Runs where the production shape runs: Redis (resumes cross workers through it), so it skips without REDIS_URL.
Answers come from the LLM simulator and last about 4 s; the drain window (12 s) is longer, so live answers end
as answers, not as `unavailable`.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from devtools.simulator.testing import SimulatorProcess
from scripts.cluster import Cluster
from tests.answer_worker import llm_simulator
from tests.scripts.clusters import running_cluster
from tests.waiting import until

pytestmark = pytest.mark.slow

LIVE_STREAMS = 50
TERMINALS = ("meta_summary", "error")


@pytest.fixture(scope="module")
def cluster(suite_simulator: SimulatorProcess) -> Iterator[Cluster]:
    if not os.environ.get("REDIS_URL"):
        pytest.skip("resumes across workers go through Redis: runs with REDIS_URL set (the Redis run of CI)")
    with (
        llm_simulator(tpot_ms=40, output_tokens=100, max_num_seqs=128, shared=suite_simulator) as simulator,
        running_cluster(
            "rolling_restart",
            LLM_BASE_URL=simulator.base_url,
            LLM_MAX_CONCURRENT_CHAT="64",
            LLM_MAX_CONCURRENT_DEFAULT="64",
            RAG_SEMANTIC_CACHE_ENABLED="false",
            SHUTDOWN_DRAIN_SECONDS="12",
        ) as started,
    ):
        yield started


@dataclass
class Outcome:
    status: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    resumes: int = 0
    problem: str = ""

    @property
    def terminal(self) -> dict[str, Any] | None:
        return self.events[-1] if self.events and self.events[-1]["channel"] in TERMINALS else None

    def whole(self) -> bool:
        seqs = [event["seq"] for event in self.events]
        terminals = [event for event in self.events if event["channel"] in TERMINALS]
        return seqs == list(range(1, len(seqs) + 1)) and terminals == self.events[-1:] and bool(terminals)


async def _read(response: httpx.Response, outcome: Outcome) -> None:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            outcome.events.append(json.loads(line[6:]))


async def ask(url: str, question: str, outcome: Outcome | None = None) -> Outcome:
    """One user: ask through nginx; when the stream breaks before its terminal event, resume it (Last-Event-ID).
    The events go into `outcome` (a new one by default) as they come."""
    outcome = Outcome() if outcome is None else outcome
    timeout = httpx.Timeout(30.0, connect=5.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:  # keeps the client cookie
        body = {"question": question, "on_disconnect": "continue"}
        try:
            async with client.stream("POST", "/api/v1/rag/ask/stream_chat", json=body) as response:
                outcome.status = response.status_code
                if response.status_code != 200:
                    outcome.problem = (await response.aread()).decode("utf-8", "replace")[:300]
                    return outcome
                await _read(response, outcome)
        except httpx.HTTPError as exc:
            outcome.problem = repr(exc)
        while outcome.terminal is None and outcome.events and outcome.resumes < 5:
            outcome.resumes += 1
            request_id = outcome.events[0]["request_id"]
            headers = {"Last-Event-ID": str(outcome.events[-1]["seq"])}
            try:
                async with client.stream("GET", f"/api/v1/rag/ask/stream/{request_id}", headers=headers) as response:
                    if response.status_code != 200:
                        outcome.problem = f"resume {response.status_code}: {(await response.aread())[:300]!r}"
                        continue
                    await _read(response, outcome)
            except httpx.HTTPError as exc:
                outcome.problem = repr(exc)
    return outcome


def test_a_rolling_restart_under_load_loses_no_stream_and_fails_no_ask(cluster: Cluster) -> None:
    restart_took: list[float] = []
    restarted = threading.Event()

    def restart() -> None:
        try:
            restart_took.extend(cluster.rolling_restart())
        finally:
            restarted.set()

    async def scenario() -> tuple[list[Outcome], list[Outcome]]:
        streams = [Outcome() for _ in range(LIVE_STREAMS)]
        live = [asyncio.create_task(ask(cluster.url, f"如何重設密碼？ ({n})", o)) for n, o in enumerate(streams)]

        def streaming(outcome: Outcome) -> bool:
            return any(event["channel"] == "answer" for event in outcome.events)

        # every live answer is streaming (or over already) when the first worker is told to stop
        await until(lambda: all(streaming(o) or o.terminal or o.problem for o in streams), within=60.0)
        threading.Thread(target=restart, name="rolling-restart", daemon=True).start()
        new: list[asyncio.Task[Outcome]] = []
        n = 0
        while not restarted.is_set():
            n += 1
            new.append(asyncio.create_task(ask(cluster.url, f"How do I download my certificate? ({n})")))
            await asyncio.sleep(0.5)  # the pace of new asks during the restart: load, not a wait
        return list(await asyncio.gather(*live)), list(await asyncio.gather(*new))

    started = time.monotonic()
    live, new = asyncio.run(scenario())
    took = time.monotonic() - started

    lost = [outcome for outcome in live if not outcome.whole()]
    assert not lost, (
        f"{len(lost)} of {len(live)} live streams lost: {[(o.status, o.problem, o.events[-1:]) for o in lost][:3]}"
    )
    nginx_log = (cluster.nginx_prefix / "error.log").read_text(errors="replace")[-3000:]
    failed = [o for o in new if not (o.whole() and o.terminal is not None and o.terminal["channel"] == "meta_summary")]
    assert not failed, (
        f"{len(failed)} of {len(new)} new asks failed: "
        f"{[(o.status, o.problem, o.events[-1:]) for o in failed][:3]}\n{nginx_log}"
    )
    assert len(new) >= 10, f"only {len(new)} new asks were sent during the restart"
    answered = sum(1 for o in live if o.terminal is not None and o.terminal["channel"] == "meta_summary")
    print(
        f"rolling restart of {len(cluster.workers)} workers in {took:.1f} s (exits after {restart_took}): "
        f"{answered}/{len(live)} live answers whole, {sum(o.resumes for o in live)} resumes, "
        f"{len(new)} new asks all answered"
    )
