"""`manage.py loadtest` against a real daphne worker (the suite's shared pair, `tests.ask_workers`) answering
through the LLM simulator: closed and open loop, SSE and WebSocket, the simulator's metrics sampled, the JSON and
the plot written, bad options named."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from devtools.loadtest.driver import LoadConfig, parse_gauge, run_load
from devtools.loadtest.report import summary
from tests.answer_worker import llm_simulator
from tests.ask_workers import AskWorkers
from tests.daphne_workers import Worker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def deployment(ask_workers: AskWorkers) -> Iterator[tuple[Worker, str]]:
    with llm_simulator(tpot_ms=10, output_tokens=20, max_num_seqs=4, shared=ask_workers.simulator) as simulator:
        yield ask_workers.workers[0], simulator.root_url + "/metrics"


@pytest.mark.parametrize("transport", ["sse", "ws"])
def test_a_closed_loop_answers_and_samples_the_llm_server(deployment: tuple[Worker, str], transport: str) -> None:
    worker, metrics_url = deployment
    config = LoadConfig(url=worker.url, transport=transport, users=6, duration=3.0, metrics_url=metrics_url)
    run = asyncio.run(run_load(config))
    result = summary(run, llm_capacity=4)
    assert result["completed"] >= 6 and result["errors"] == {}, result
    assert result["answers_per_s"] > 0
    assert 0 < result["ttft_ms"]["p50"] <= result["total_ms"]["p50"] <= result["total_ms"]["p99"]
    assert result["cached"] == 0  # distinct questions: the cache served none
    llm = result["llm_server"]
    assert llm["samples"] >= 3 and 0 < llm["running_max"] <= 4 and 0 < llm["utilisation"] <= 1


def test_the_command_runs_an_open_loop_and_writes_json_and_a_plot(
    deployment: tuple[Worker, str], tmp_path: Path
) -> None:
    worker, _ = deployment
    out, err = StringIO(), StringIO()
    call_command(
        "loadtest",
        worker.url,
        "--rate",
        "4",
        "--duration",
        "3",
        "--json",
        str(tmp_path / "r.json"),
        "--plot",
        str(tmp_path / "r.svg"),
        stdout=out,
        stderr=err,
    )
    result = json.loads(out.getvalue())
    assert result == json.loads((tmp_path / "r.json").read_text())
    assert result["config"]["rate"] == 4 and 8 <= result["asked"] <= 16, result
    assert result["completed"] == result["asked"], result
    assert "answered" in err.getvalue()  # progress while it ran
    svg = (tmp_path / "r.svg").read_text()
    assert svg.startswith("<svg") and "<polyline" in svg and svg.count("<circle") == result["completed"]


def test_bad_options_are_named() -> None:
    with pytest.raises(CommandError, match="--users must be at least 1"):
        call_command("loadtest", "http://127.0.0.1:9", "--users", "0")
    with pytest.raises(CommandError, match="--duration must be positive"):
        call_command("loadtest", "http://127.0.0.1:9", "--duration", "0")


def test_a_deployment_that_does_not_answer_is_counted_not_fatal() -> None:
    from devtools.simulator.testing import free_port

    run = asyncio.run(run_load(LoadConfig(url=f"http://127.0.0.1:{free_port()}", users=2, duration=0.5)))
    result = summary(run)
    refused = sum(n for outcome, n in result["errors"].items() if outcome.startswith("transport:"))
    assert result["completed"] == 0 and refused >= 2, result  # named by the exception: transport:ConnectError


def test_gauges_are_summed_over_labels() -> None:
    text = 'vllm:num_requests_running{model_name="a"} 2.0\nvllm:num_requests_running{model_name="b"} 1.0\n'
    assert parse_gauge(text, "vllm:num_requests_running") == 3.0
    assert parse_gauge(text, "vllm:num_requests_waiting") == 0.0


def test_degraded_answers_and_skipped_calls_are_counted_from_the_terminal_event() -> None:
    from devtools.loadtest.driver import AnswerResult, Run, _record_event

    run = Run(LoadConfig(url="http://127.0.0.1:9"))
    events: list[dict[str, Any]] = [
        {"channel": "meta_summary", "degraded": True, "skipped": [{"step": "planner", "reason": "slot_timeout"}]},
        {"channel": "meta_summary", "degraded": False, "skipped": []},
        {"channel": "meta_summary"},
    ]
    for event in events:
        result = AnswerResult(started=0.0)
        _record_event({"channel": "answer", "delta": "x"}, result, 0.0)
        assert _record_event(event, result, 0.0)
        run.results.append(result)
    figures = summary(run)
    assert figures["completed"] == 3
    assert figures["degraded"] == 1 and figures["skipped"] == {"planner": 1}
