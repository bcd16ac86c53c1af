"""An auxiliary step skipped for want of an LLM slot, seen from the whole pipeline: the answer still comes, the
planner's call never reached the server, and `meta_summary` says which step was skipped and why."""

from __future__ import annotations

import copy

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.engine import WorkflowDefinition
from rag.runtime import AskRequest
from rag.workflows.default import DEFAULT_WORKFLOW
from tests.rag.llm.conftest import AttemptLog
from tests.rag.pipeline.conftest import RuntimeFactory, check_stream


def planner_waiting_at_most(seconds: float) -> WorkflowDefinition:
    data = copy.deepcopy(DEFAULT_WORKFLOW)
    for node in data["nodes"]:
        if node["type"] == "planner":
            node["params"] = {"slot_wait": seconds}
    return WorkflowDefinition.from_dict(data)


async def test_a_planner_skipped_for_want_of_a_slot_is_named_in_meta_summary(
    make_runtime: RuntimeFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager, attempts: AttemptLog
) -> None:
    manager.set_limit("chat", 1)
    runtime = make_runtime()
    held = manager.acquire("chat")
    await held.__aenter__()  # another request's answer holds the only slot
    run = await runtime.start(
        AskRequest(question="How do I reset my password?", backend="chat"), workflow=planner_waiting_at_most(0.0)
    )
    events = []
    async for event in run.events():
        events.append(event)
        if event["stage"] == "plan":
            await held.__aexit__(None, None, None)  # the answer to come finds the slot free

    summary = check_stream(events)
    assert summary["channel"] == "meta_summary" and not summary["degraded"]
    assert summary["skipped"] == [{"step": "planner", "reason": "slot_timeout"}]
    [plan] = [e for e in events if e["stage"] == "plan"]
    assert (plan["plan_source"], plan["skipped"]) == ("rules_fallback", "slot_timeout")
    assert "planner" not in [r.args[4] for r in attempts.records]  # type: ignore[index]
    assert manager.stats()["auxiliary_skipped"] == {"planner": 1}
    assert (await sim.astats())["attempts"] == attempts.count  # only the calls that started reached the server
