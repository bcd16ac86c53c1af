"""Upstream faults seen from the whole pipeline: what the client's stream ends with, how long it took, and that the
simulator saw exactly the attempts the call policy made. The `sim` fixture checks nothing is left running."""

from __future__ import annotations

import contextlib
import time

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.runtime import AskRequest
from tests.rag.llm.conftest import AttemptLog, wait_idle
from tests.rag.pipeline.conftest import RuntimeFactory, ask, check_stream, usage_total

QUESTION = "How do I reset my password?"


async def upstream_attempts(sim: SimulatorProcess) -> int:
    return int((await sim.astats())["attempts"])


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_429_with_retry_after_waits_then_the_answer_completes(
    backend: str, make_runtime: RuntimeFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["429"], retry_after=2)
    started = time.monotonic()
    events = await ask(make_runtime(), QUESTION, backend=backend)
    elapsed = time.monotonic() - started

    summary = check_stream(events)
    assert summary["channel"] == "meta_summary"
    assert elapsed >= 2.0  # Retry-After was honoured; waited once, the attempts say
    [plan] = [e for e in events if e["stage"] == "plan"]
    assert plan["plan_source"] == "llm"  # the planner's call was the one that waited, and then succeeded
    assert attempts.outcomes == ["status", "ok", "ok"]  # plan, answer: the summary is the chat's, afterwards
    assert await upstream_attempts(sim) == attempts.count == 3
    assert summary["usage"] == usage_total(events)


async def test_a_burst_of_500s_is_retried_then_ends_with_one_upstream_error(
    make_runtime: RuntimeFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(rate_500=1.0)
    # degraded answers off: this is about the error the stream ends with (test_degraded: the answer instead)
    events = await ask(make_runtime(max_attempts=3, degraded_answers=False), QUESTION)

    terminal = check_stream(events)
    assert (terminal["channel"], terminal["code"]) == ("error", "upstream_error")
    assert "HTTP 500, 3 attempt(s)" in terminal["message"]
    # The planner gave up first and fell back to the rules (the answer matters more than the plan); the answer
    # itself cannot be had without the model.
    [plan] = [e for e in events if e["stage"] == "plan"]
    assert (plan["plan_source"], plan["fallback_reason"]) == ("rules_fallback", "upstream_error")
    assert not [e for e in events if e["channel"] in ("answer", "reasoning", "meta")]
    assert attempts.count == 6 == await upstream_attempts(sim)


async def test_a_hang_before_the_first_token_ends_with_a_timeout(
    make_runtime: RuntimeFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["ok", "hang"])  # the plan is answered, the answer never starts
    started = time.monotonic()
    events = await ask(make_runtime(first_token_timeout=1.0, degraded_answers=False), QUESTION)
    elapsed = time.monotonic() - started

    terminal = check_stream(events)
    assert (terminal["channel"], terminal["code"]) == ("error", "timeout")
    assert "sent nothing for 1 s" in terminal["message"]
    assert elapsed >= 1.0  # the deadline was waited for; not retried, the attempts say
    assert attempts.outcomes == ["ok", "first_token_timeout"]  # not retried
    assert await upstream_attempts(sim) == 2


async def test_a_drop_mid_stream_is_one_upstream_error_without_a_retry(
    make_runtime: RuntimeFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["ok", "drop:3"])  # the answer's connection is cut after three tokens
    events = await ask(make_runtime(degraded_answers=False), QUESTION)

    terminal = check_stream(events)
    assert (terminal["channel"], terminal["code"]) == ("error", "upstream_error")
    assert len([e for e in events if e["channel"] == "reasoning"]) == 3  # what the user had seen stays seen
    # An incomplete body (a connection error) or a clean end without the final chunk: either way no retry.
    assert attempts.outcomes[0] == "ok" and attempts.outcomes[1] in ("failed_mid_stream", "dropped_mid_stream")
    assert attempts.count == 2 == await upstream_attempts(sim)


async def test_a_client_leaving_mid_answer_stops_the_upstream_stream_at_once(
    make_runtime: RuntimeFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    await sim.afaults(fail_next=["ok", "stall:2:30"])  # the answer stalls for 30 s after two tokens
    run = await make_runtime().start(AskRequest(question=QUESTION))
    events = run.events()
    async with contextlib.aclosing(events):
        async for event in events:
            if event["channel"] == "reasoning":
                break  # the client goes away while the model is generating
    assert run.done and run.terminal is not None and run.terminal["code"] == "cancelled"
    assert manager.stats()["backends"]["chat"]["in_progress"] == 0
    started = time.monotonic()
    await wait_idle(sim, within=1.0)  # the simulator saw the disconnect and stopped generating
    assert time.monotonic() - started < 1.0


async def test_a_hang_before_the_first_token_is_answered_from_the_passages(
    make_runtime: RuntimeFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["ok", "hang"])  # the plan is answered, the answer never starts
    events = await ask(make_runtime(first_token_timeout=1.0), QUESTION)

    summary = check_stream(events)
    assert summary["channel"] == "meta_summary" and summary["degraded"] is True
    [degraded] = [e for e in events if e["stage"] == "generate" and e.get("answer_source") == "degraded"]
    assert degraded["fallback_reason"] == "timeout"
    answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert answer.startswith("(The full assistant is unavailable right now") and "[1]" in answer
    assert attempts.outcomes == ["ok", "first_token_timeout"]  # the summary did not wait for the model again
