"""Degraded mode: the LLM server goes away mid-conversation; the next answer comes from the retrieved passages,
cited, with a notice, flagged `degraded` and counted, unless the setting turns it off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.deps import PipelineConfig, PipelineDeps
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.nodes import build_registry
from rag.prompting.prompts import CataloguePrompts
from rag.rules import messages
from rag.runtime import AskRequest, PipelineRuntime
from rag.state import Turn
from rag.workflows.default import default_workflow
from tests.rag.llm.conftest import manager  # noqa: F401 - fixture, used by name
from tests.rag.pipeline.conftest import check_stream


@pytest.fixture
def own_simulator() -> Iterator[SimulatorProcess]:
    """A simulator of this test's own: it is stopped mid-conversation."""
    with SimulatorProcess().start(ttft_ms=1, tpot_ms=1, output_tokens=30) as simulator:
        yield simulator


def runtime_for(simulator: SimulatorProcess, retriever: Any, *, degraded_answers: bool = True) -> PipelineRuntime:
    llm = LLMBackend(
        LLMConfig(base_url=simulator.base_url, api_key="test", chat_model="sim-chat", connect_timeout=1.0),
        CallPolicyConfig(max_attempts=2, backoff_base=0.01, backoff_max=0.02, jitter=False),
    )
    deps = PipelineDeps(
        retriever=retriever,
        config=PipelineConfig(degraded_answers=degraded_answers),
        llm=llm,
        prompts=CataloguePrompts(),
    )
    return PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())


async def ask(runtime: PipelineRuntime, question: str, history: tuple[Turn, ...] = ()) -> tuple[list[Any], Any]:
    run = await runtime.start(AskRequest(question=question, history=history))
    events = [event async for event in run.events()]
    return events, run.state


async def test_the_answer_after_the_server_stops_is_degraded_cited_and_says_so(
    own_simulator: SimulatorProcess,
    demo_retriever: Any,
    manager: LLMConcurrencyManager,  # noqa: F811
) -> None:
    runtime = runtime_for(own_simulator, demo_retriever)
    events, first = await ask(runtime, "如何重設密碼？")
    assert check_stream(events)["channel"] == "meta_summary"
    assert check_stream(events)["degraded"] is False  # the model answered

    own_simulator.stop()
    history = (Turn("user", "如何重設密碼？"), Turn("assistant", first.answer))
    events, state = await ask(runtime, "帳號被鎖定怎麼辦？", history)

    summary = check_stream(events)
    assert summary["channel"] == "meta_summary" and summary["degraded"] is True
    answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert answer == state.answer
    assert answer.startswith(messages.text("degraded", "zh-hant"))  # says so, in one line, first
    assert "[1]" in answer and summary["sources"]  # cited
    assert any(e["channel"] == "status" and e.get("answer_source") == "degraded" for e in events)
    # what the console shows
    assert runtime._deps.answer_stats.stats() == {"degraded": 1, "summary_llm": 0, "summary_fallback": 0}


async def test_with_degraded_answers_off_the_failure_is_an_error(
    own_simulator: SimulatorProcess,
    demo_retriever: Any,
    manager: LLMConcurrencyManager,  # noqa: F811
) -> None:
    runtime = runtime_for(own_simulator, demo_retriever, degraded_answers=False)
    own_simulator.stop()
    events, state = await ask(runtime, "帳號被鎖定怎麼辦？")
    terminal = check_stream(events)
    assert terminal["channel"] == "error" and terminal["code"] == "upstream_error"
    assert not state.degraded


async def test_a_server_failing_after_the_first_token_finishes_the_answer_from_the_passages(
    own_simulator: SimulatorProcess,
    demo_retriever: Any,
    manager: LLMConcurrencyManager,  # noqa: F811
) -> None:
    runtime = runtime_for(own_simulator, demo_retriever)
    await own_simulator.afaults(fail_next=["ok", "drop:5"])  # the plan, then the answer is cut after five tokens

    events, state = await ask(runtime, "如何重設密碼？")

    summary = check_stream(events)
    assert summary["channel"] == "meta_summary" and summary["degraded"] is True  # not upstream_error
    answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert answer == state.answer
    notice = messages.text("degraded", "zh-hant")
    model_part, _, rest = answer.partition(f"\n\n{notice}\n\n")
    assert model_part and rest  # what the reader had stays, then the notice, then the passages
    assert "[1]" in rest and summary["sources"]
    [generate] = [e for e in events if e["channel"] == "status" and e.get("answer_source") == "degraded"]
    assert generate["mid_answer"] is True and generate["fallback_reason"] == "upstream_error"
    assert runtime._deps.answer_stats.stats()["degraded"] == 1
