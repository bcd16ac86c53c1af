"""Every event the pipeline emits matches its schema (rag.events.PipelineEvent): offline, and with the LLM
simulator over HTTP on both backends; every channel is seen at least once across the runs."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from pydantic import TypeAdapter

from devtools.simulator.testing import SimulatorProcess
from rag.deps import PipelineConfig, PipelineDeps
from rag.events import CHANNELS, EVENT_TYPES, Event, Summary
from rag.nodes import build_registry
from rag.runtime import PipelineRuntime
from rag.state import Turn
from rag.workflows.default import default_workflow
from tests.rag.pipeline.conftest import RuntimeFactory, ask, check_stream

FOLLOW_UP_HISTORY = (
    Turn("user", "How do I reset my password?"),
    Turn("assistant", "Open the sign-in page and choose Forgot password. [1]"),
)


@cache
def _adapter(channel: str) -> TypeAdapter[Any]:
    return TypeAdapter(EVENT_TYPES[channel])


def schema_problems(event: Event) -> list[str]:
    """What is wrong with one event: an unknown channel, a missing or unknown key, a value of the wrong type."""
    channel = event.get("channel")
    if channel not in EVENT_TYPES:
        return [f"unknown channel {channel!r}"]
    kind = EVENT_TYPES[channel]
    keys = set(event)
    problems = [f"missing {key}" for key in sorted(kind.__required_keys__ - keys)]
    problems += [f"unknown {key}" for key in sorted(keys - kind.__required_keys__ - kind.__optional_keys__)]
    try:
        _adapter(channel).validate_python(event, strict=True)
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def check_schema(events: list[Event]) -> Event:
    """Each event matches its channel's TypedDict; the stream is whole (seq without gaps, one terminal event, last)."""
    for event in events:
        assert schema_problems(event) == [], event
    terminal = check_stream(events)
    if terminal["channel"] == "meta_summary":
        # a pipeline run's summary carries every field the schema names
        assert set(terminal) >= Summary.__optional_keys__, sorted(Summary.__optional_keys__ - set(terminal))
    return terminal


def test_the_checker_refuses_what_the_schema_does_not_allow() -> None:
    good = {
        "source": "ask_stream",
        "request_id": "r",
        "seq": 1,
        "node": "guard",
        "channel": "answer",
        "stage": "delta",
        "delta": "Hi",
    }
    assert schema_problems(good) == []
    assert schema_problems({**good, "channel": "answers"}) == ["unknown channel 'answers'"]
    assert schema_problems({k: v for k, v in good.items() if k != "delta"})[0] == "missing delta"
    assert schema_problems({**good, "extra": 1}) == ["unknown extra"]
    assert schema_problems({**good, "seq": "1"})  # a string is not a number, even one that reads as one
    assert schema_problems({**good, "stage": "final"})  # an answer is always a delta
    status = {**good, "channel": "status", "stage": "end", "route": "default", "ms": 1.5}
    del status["delta"]
    assert schema_problems(status) == []
    assert schema_problems({**status, "hits": "3"})


@pytest.fixture
def offline_runtime(demo_retriever: Any) -> PipelineRuntime:
    deps = PipelineDeps(retriever=demo_retriever, config=PipelineConfig())
    return PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())


async def test_every_event_of_offline_runs_matches_its_schema(offline_runtime: PipelineRuntime) -> None:
    answered = await ask(offline_runtime, "How do I reset my password?")
    follow_up = await ask(offline_runtime, "And how long is the link valid?", history=FOLLOW_UP_HISTORY)
    refused = await ask(offline_runtime, "   ")

    assert check_schema(answered)["channel"] == "meta_summary"
    assert check_schema(follow_up)["channel"] == "meta_summary"
    assert check_schema(refused)["code"] == "bad_request"


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_every_event_of_runs_against_the_llm_simulator_matches_its_schema(
    backend: str, make_runtime: RuntimeFactory, sim: SimulatorProcess
) -> None:
    runtime = make_runtime()
    answered = await ask(runtime, "How do I reset my password?", backend=backend)
    follow_up = await ask(
        runtime, "How long is the reset link valid?", backend=backend, history=FOLLOW_UP_HISTORY, summary="Reset."
    )
    await sim.afaults(rate_500=1.0)  # every attempt of the next question fails upstream
    failed = await ask(make_runtime(degraded_answers=False), "How do I reset my password?", backend=backend)

    events = answered + follow_up + failed
    assert check_schema(answered)["channel"] == "meta_summary"
    assert check_schema(follow_up)["channel"] == "meta_summary"
    assert check_schema(failed)["channel"] == "error"
    assert {event["channel"] for event in events} == set(CHANNELS)  # every kind of event was checked
