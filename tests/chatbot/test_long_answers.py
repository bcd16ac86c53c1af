"""An answer streaming for more than 30 s arrives whole over SSE and over WebSocket with the channel layer on Redis.

Through a real daphne worker (the suite's shared pair, `tests.ask_workers`) and the LLM simulator: every event
(seq 1..n, no gap) and exactly one terminal event, a `meta_summary`. Runs in the suite's Redis run
(`REDIS_URL=redis://127.0.0.1:6379/<db> pytest ...`); without `REDIS_URL` it skips, as the in-memory layer has no
socket to time out.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest

from tests.answer_worker import llm_simulator
from tests.ask_workers import AskWorkers
from tests.daphne_workers import Worker
from tests.stream_clients import Answer, asse_ask, ws_ask

REDIS_URL = os.environ.get("REDIS_URL", "")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not REDIS_URL, reason="needs REDIS_URL (the channel layer on Redis); set it to run"),
]

ANSWER_SECONDS = 30.0
TPOT_MS = 150.0


@pytest.fixture(scope="module")
def worker(ask_workers: AskWorkers) -> Iterator[Worker]:
    # The answer's own tokens alone last ANSWER_SECONDS (the pipeline's other model calls come on top).
    tokens = int(ANSWER_SECONDS * 1000 / TPOT_MS) + 1
    with llm_simulator(tpot_ms=TPOT_MS, output_tokens=tokens, shared=ask_workers.simulator):
        yield ask_workers.workers[0]


async def timed(url: str, transport: str) -> tuple[Answer, float]:
    started = time.monotonic()
    question, within = "如何重設密碼？", 6 * ANSWER_SECONDS
    if transport == "sse":
        answer = await asse_ask(url, question, read_seconds=within)
    else:
        answer = await ws_ask(url, question, within=within)
    return answer, time.monotonic() - started


def test_a_30_s_answer_arrives_whole_over_sse_and_over_websocket(worker: Worker) -> None:
    async def both() -> tuple[tuple[Answer, float], tuple[Answer, float]]:
        return await asyncio.gather(timed(worker.url, "sse"), timed(worker.url, "ws"))

    for (answer, seconds), transport in zip(asyncio.run(both()), ("SSE", "WebSocket"), strict=True):
        assert answer.whole(), f"{transport}: {answer.describe()}\n{worker.output()}"
        assert answer.terminal is not None and answer.terminal["channel"] == "meta_summary", answer.describe()
        assert sum(1 for e in answer.events if e["channel"] == "answer") >= ANSWER_SECONDS * 1000 / TPOT_MS
        assert seconds >= ANSWER_SECONDS, f"{transport}: the answer took {seconds:.1f} s, not a long one"
    assert "Exception inside application" not in worker.output()
