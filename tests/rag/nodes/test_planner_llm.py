"""The planner with an LLM: a JSON-schema plan made consistent with the routes, and the rules whenever the model's
plan cannot be had (invalid output, timeout, upstream errors), said in the status event."""

from __future__ import annotations

import asyncio
import json

import pytest

from concurrency.context import request_scope
from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.deps import PromptSnapshot
from rag.nodes.planner import PLAN_SCHEMA, Planner
from rag.prompting.prompts import CataloguePrompts
from rag.state import SkippedStep
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory
from tests.rag.nodes.conftest import CannedFactory
from tests.rag.nodes.support import drain, make_state, make_writer
from tests.waiting import until

PREVIOUS = (
    "Open the reset link in the email [1].\n\nSources:\n[1] How do I reset my password (https://help.example/en/pr)"
)


def plan_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["channel"] == "status" and e["stage"] == "plan"]


def usage_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["channel"] == "meta"]


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_valid_json_plan_comes_from_the_llm(
    backend: str, make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = make_state("Where can I download the certificate reissue form?", backend=backend, language="en")
    state.normalized_question = state.question
    writer, channel = make_writer()
    route = await Planner(llm=make_backend(), prompts=prompts).run(state, writer)

    # The simulator picks the enum value the question names and answers should_retrieve=false.
    assert route == "retrieve"
    assert (state.intent, state.should_retrieve, state.plan_source) == ("form_download", True, "llm")
    assert state.followup_instruction == ""
    events = await drain(channel)
    [plan] = plan_events(events)
    assert plan["plan_source"] == "llm" and "fallback_reason" not in plan
    assert "should_retrieve" in plan["adjusted"]  # the model's false was overruled for a form question
    [usage] = usage_events(events)
    assert usage["node"] == "planner" and usage["call"] == "plan" and usage["usage"]["total_tokens"] > 0
    assert state.usage.as_dict() == usage["usage"]
    [recorded] = await sim.arequests()
    request = recorded["body"]
    schema = (
        request["response_format"]["json_schema"]["schema"]
        if backend == "chat"
        else request["text"]["format"]["schema"]
    )
    assert schema == PLAN_SCHEMA
    assert request["temperature"] == 0.0  # from the prompt's config


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("I think this is a simple FAQ question.", "not valid JSON"),
        (
            json.dumps({"intent": "weather", "should_retrieve": True, "followup_instruction": ""}),
            "$.intent: Input should be",
        ),
        (json.dumps({"intent": "simple_faq"}), "$.should_retrieve: Field required"),
    ],
)
async def test_invalid_output_falls_back_to_the_rules_and_says_why(
    reply: str, why: str, canned: CannedFactory, prompts: CataloguePrompts
) -> None:
    llm, server = await canned(reply)
    state = make_state(normalized_question="請問時數補登申請表在哪裡下載", language="zh-hant")
    writer, channel = make_writer()
    route = await Planner(llm=llm, prompts=prompts).run(state, writer)

    assert route == "retrieve"
    assert (state.intent, state.plan_source) == ("form_download", "rules_fallback")
    events = await drain(channel)
    [plan] = plan_events(events)
    assert plan["plan_source"] == "rules_fallback"
    assert plan["fallback_reason"] == "invalid_output"
    assert why in plan["detail"]
    # The rejected reply was still paid for: its tokens are counted once.
    [usage] = usage_events(events)
    assert usage["usage"] == {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18} == state.usage.as_dict()
    assert len(server.requests) == 1


async def test_a_timeout_falls_back_to_the_rules(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    await sim.afaults(fail_next=["hang"])
    state = make_state(normalized_question="Tell me a joke", language="en")
    writer, channel = make_writer()
    route = await Planner(llm=make_backend(), prompts=prompts, timeout=0.5).run(state, writer)

    assert route == "direct" and state.plan_source == "rules_fallback"
    [plan] = plan_events(await drain(channel))
    assert plan["fallback_reason"] == "timeout"
    assert state.usage.total_tokens == 0


async def test_upstream_errors_fall_back_after_the_policy_gave_up(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog, prompts: CataloguePrompts
) -> None:
    await sim.afaults(fail_next=["500", "500", "500"])
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    route = await Planner(llm=make_backend(max_attempts=2), prompts=prompts).run(state, writer)

    assert route == "retrieve" and (state.intent, state.plan_source) == ("simple_faq", "rules_fallback")
    events = await drain(channel)
    [plan] = plan_events(events)
    assert plan["fallback_reason"] == "upstream_error"
    assert usage_events(events) == []
    assert attempts.count == 2


async def test_llm_follow_up_plan_keeps_the_users_instruction(canned: CannedFactory, prompts: CataloguePrompts) -> None:
    plan = {"intent": "conversation_followup", "should_retrieve": False, "followup_instruction": "Translate it."}
    llm, _ = await canned(json.dumps(plan))
    state = make_state(normalized_question="翻成英文", language="zh-hant", previous_answer=PREVIOUS)
    route = await Planner(llm=llm, prompts=prompts).run(state, make_writer()[0])
    assert route == "followup"
    assert (state.intent, state.should_retrieve, state.followup_instruction) == (
        "conversation_followup",
        False,
        "translate:en",
    )


async def test_llm_follow_up_without_a_previous_answer_is_a_question(
    canned: CannedFactory, prompts: CataloguePrompts
) -> None:
    plan = {"intent": "conversation_followup", "should_retrieve": False, "followup_instruction": "Shorten it."}
    llm, _ = await canned(json.dumps(plan))
    state = make_state(normalized_question="shorter please", language="en")
    writer, channel = make_writer()
    assert await Planner(llm=llm, prompts=prompts).run(state, writer) == "retrieve"
    assert (state.intent, state.plan_source) == ("simple_faq", "llm")
    [event] = plan_events(await drain(channel))
    assert event["adjusted"][0] == "intent"


async def test_out_of_scope_goes_direct(canned: CannedFactory, prompts: CataloguePrompts) -> None:
    plan = {"intent": "out_of_scope", "should_retrieve": False, "followup_instruction": ""}
    llm, _ = await canned(json.dumps(plan))
    state = make_state(normalized_question="What's the weather tomorrow?", language="en")
    assert await Planner(llm=llm, prompts=prompts).run(state, make_writer()[0]) == "direct"
    assert (state.intent, state.should_retrieve) == ("out_of_scope", False)


async def test_an_unavailable_prompt_falls_back_too(canned: CannedFactory) -> None:
    class Broken:
        async def get(self, name: str) -> PromptSnapshot:
            raise RuntimeError("registry down")

    llm, server = await canned("{}")
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    await Planner(llm=llm, prompts=Broken()).run(state, writer)
    [event] = plan_events(await drain(channel))
    assert (event["plan_source"], event["fallback_reason"]) == ("rules_fallback", "prompt_unavailable")
    assert server.requests == []


async def test_a_planner_that_gets_no_slot_in_time_is_skipped_before_its_call_starts(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager, prompts: CataloguePrompts
) -> None:
    manager.set_limit("chat", 1)
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    async with manager.acquire("chat"):  # an answer holds the only slot
        route = await Planner(llm=make_backend(), prompts=prompts, slot_wait=0.05).run(state, writer)

    assert route == "retrieve" and (state.intent, state.plan_source) == ("simple_faq", "rules_fallback")
    assert state.skipped == [SkippedStep("planner", "slot_timeout")]
    [plan] = plan_events(await drain(channel))
    assert (plan["fallback_reason"], plan["skipped"]) == ("busy", "slot_timeout")
    assert (await sim.astats())["attempts"] == 0  # nothing was sent upstream
    assert manager.stats()["auxiliary_skipped"] == {"planner": 1}


async def test_a_planner_that_waited_for_its_slot_longer_than_its_timeout_still_plans_with_the_llm(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager, prompts: CataloguePrompts
) -> None:
    manager.set_limit("chat", 1)
    await sim.afaults(fail_next=["stall:2:0.8", "ok"])  # an answer holds the only slot for about 0.8 s
    answer = asyncio.create_task(make_backend().stream_text(backend="chat", node="answer", messages=USER))
    await until(lambda: manager.stats()["backends"]["chat"]["in_progress"] == 1)
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    with request_scope("plan") as ctx:
        await Planner(llm=make_backend(), prompts=prompts, timeout=0.3, slot_wait=5.0).run(state, writer)

    assert ctx.permit_wait_s > 0.3
    assert state.plan_source == "llm" and state.skipped == []
    [plan] = plan_events(await drain(channel))
    assert "skipped" not in plan
    await answer
    assert manager.stats()["auxiliary_skipped"] == {}
