"""The default workflow with an LLM, end to end, for both backends: events in order, the answer and the model's
reasoning streamed token by token, one usage event per LLM call adding up to the summary's usage, one terminal."""

from __future__ import annotations

import pytest

from devtools.simulator.testing import SimulatorProcess
from rag.state import Turn
from tests.rag.pipeline.conftest import RETRIEVAL_PATH, RuntimeFactory, ask, check_stream, usage_total


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_a_question_runs_the_whole_workflow_with_the_llm(
    backend: str, make_runtime: RuntimeFactory, sim: SimulatorProcess
) -> None:
    events = await ask(make_runtime(), "How do I reset my password?", backend=backend)
    summary = check_stream(events)

    assert summary["channel"] == "meta_summary" and summary["backend"] == backend
    # Each node starts and ends before the next one starts.
    lifecycle = [(e["node"], e["stage"]) for e in events if e["channel"] == "status" and e["stage"] in ("start", "end")]
    assert lifecycle == [(node, stage) for node in RETRIEVAL_PATH for stage in ("start", "end")]
    [plan] = [e for e in events if e["stage"] == "plan"]
    assert (plan["plan_source"], plan["intent"]) == ("llm", "simple_faq")

    answer = [e for e in events if e["channel"] == "answer"]
    reasoning = [e for e in events if e["channel"] == "reasoning"]
    assert {e["node"] for e in answer + reasoning} == {"response_synth"}
    assert len(reasoning) == 4 and len(answer) > 10
    assert events.index(reasoning[-1]) < events.index(answer[0])
    text = "".join(e["delta"] for e in answer)
    assert text.startswith("Summary:") and "\n\nSources:\n[1] " in text

    usages = [e for e in events if e["channel"] == "meta"]
    assert [(e["node"], e["call"]) for e in usages] == [
        ("planner", "plan"),
        ("response_synth", "answer"),
    ]  # the summary is written after the terminal event, by whoever stores the conversation
    assert all(e["usage"]["total_tokens"] > 0 for e in usages)
    assert summary["usage"] == usage_total(events)
    assert summary["intent"] == "simple_faq" and summary["tools"] == ["retrieval"]
    assert summary["sources"] and summary["sources"][0]["ref"] == 1
    stats = await sim.astats()
    assert stats["attempts"] == stats["completed"] == 2
    assert stats["endpoints"][backend]["attempts"] == 2


async def test_a_follow_up_question_is_rewritten_before_the_search(
    make_runtime: RuntimeFactory, sim: SimulatorProcess
) -> None:
    history = (
        Turn("user", "How do I reset my password?"),
        Turn("assistant", "Select Forgot password on the login page [1].\n\nSources:\n[1] Reset (https://x/pr)"),
    )
    events = await ask(
        make_runtime(), "How long is the reset link valid?", history=history, summary="Resetting a password."
    )
    summary = check_stream(events)
    assert summary["channel"] == "meta_summary"
    [rewrite] = [e for e in events if e["stage"] == "rewrite"]
    assert rewrite["query_source"] == "llm"
    assert [e["call"] for e in events if e["channel"] == "meta"] == ["plan", "rewrite", "answer"]
    assert summary["usage"] == usage_total(events)
    assert summary["search_query"] != "How long is the reset link valid?"
