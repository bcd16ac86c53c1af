"""SIGTERM to a real daphne worker with answers streaming over SSE and WebSocket (chatbot.drain).

Answers that can finish within the drain window finish, and the worker exits as soon as they have; answers that
cannot end with the terminal `error` `unavailable` (with `retry_after`) when the window closes. Either way every
stream has exactly one terminal event, every exchange is recorded, a new ask after the signal is refused (SSE 503 +
Retry-After, WebSocket closed 4012), and the process exits within the window plus 2 s. With `REDIS_URL` set (the
suite's Redis run) the worker's channel layer is on Redis.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from devtools.simulator.testing import SimulatorProcess
from tests.answer_worker import (
    SigtermRun,
    answer_worker_env,
    llm_simulator,
    recorded_exchanges,
    streams_through_sigterm,
)
from tests.daphne_workers import Worker

pytestmark = pytest.mark.slow

QUESTION = "如何重設密碼？"
# Each model call streams 60 tokens 100 ms apart: at the signal an answer has seconds left to stream.
TPOT_MS, TOKENS = 100.0, 60
EXIT_MARGIN = 2.0


@pytest.fixture(scope="module")
def environment(suite_simulator: SimulatorProcess) -> Iterator[dict[str, str]]:
    with (
        llm_simulator(tpot_ms=TPOT_MS, output_tokens=TOKENS, shared=suite_simulator) as simulator,
        answer_worker_env(simulator.base_url, redis_url=os.environ.get("REDIS_URL", ""), label="drain-daphne") as env,
    ):
        yield env


def sigterm_run(env: dict[str, str], window: float) -> SigtermRun:
    worker = Worker({**env, "SHUTDOWN_DRAIN_SECONDS": str(window)})
    try:
        worker.wait_ready()
        run = asyncio.run(
            streams_through_sigterm(worker, sse=2, ws=2, question=QUESTION, exit_within=window + 15, read_seconds=60)
        )
        output = worker.output()
    finally:
        worker.stop()
    assert run.exit_seconds is not None, f"still running {window + 15} s after SIGTERM:\n{output}"
    assert run.exit_code == 0, output
    for answer in run.answers:
        assert answer.whole(), f"{answer.describe()}\n{output}"
    # Asked after the signal: refused in a way a proxy retries elsewhere.
    assert run.refused_sse.status == 503, run.refused_sse.describe()
    assert run.refused_sse.headers["retry-after"] == "1"
    assert '"code": "unavailable"' in run.refused_sse.body
    assert run.refused_ws.close_code == 4012 and run.refused_ws.events == [], run.refused_ws.describe()
    return run


def test_answers_that_fit_the_window_finish_and_the_worker_exits_after_them(environment: dict[str, str]) -> None:
    window = 20.0
    run = sigterm_run(environment, window)
    assert {answer.terminal["channel"] for answer in run.answers if answer.terminal} == {"meta_summary"}
    assert run.exit_seconds is not None and run.exit_seconds < window  # it did not wait for the whole window
    request_ids = [answer.events[0]["request_id"] for answer in run.answers]
    assert recorded_exchanges(environment, request_ids) == dict.fromkeys(request_ids, "ok/")
    # The WebSockets were closed for their clients to reconnect elsewhere.
    assert [answer.close_code for answer in run.answers[2:]] == [4012, 4012]


def test_answers_still_running_when_the_window_closes_end_with_unavailable(environment: dict[str, str]) -> None:
    window = 1.5
    run = sigterm_run(environment, window)
    for answer in run.answers:
        terminal = answer.terminal
        assert terminal is not None
        assert (terminal["channel"], terminal["code"], terminal["retry_after"]) == ("error", "unavailable", 1)
        assert len(answer.events) > 2  # it had streamed part of its answer
    # The window's close ended them (each terminal event above is its `unavailable`); the exit follows within the
    # margin. One bound: that it did not exit before the window closed, the terminal events say.
    assert run.exit_seconds is not None and run.exit_seconds <= window + EXIT_MARGIN
    request_ids = [answer.events[0]["request_id"] for answer in run.answers]
    assert recorded_exchanges(environment, request_ids) == dict.fromkeys(request_ids, "failed/unavailable")
