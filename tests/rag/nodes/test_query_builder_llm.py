"""query_builder with an LLM: follow-ups rewritten into standalone queries, retries varied by a named strategy,
the offline queries when the model cannot help."""

from __future__ import annotations

import json

from devtools.simulator.testing import SimulatorProcess
from rag.nodes.query_builder import VARIATION_SCHEMA, QueryBuilder
from rag.prompting.prompts import CataloguePrompts
from tests.rag.llm.conftest import BackendFactory
from tests.rag.nodes.conftest import CannedFactory
from tests.rag.nodes.support import drain, history, make_state, make_writer

HISTORY = history(("user", "How do I reset my password?"), ("assistant", "Select Forgot password [1]."))


async def test_first_pass_without_history_asks_no_model(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    await QueryBuilder(llm=make_backend(), prompts=prompts).run(state, writer)
    assert state.search_query == "How do I reset my password?"
    assert await drain(channel) == []
    assert (await sim.astats())["attempts"] == 0


async def test_a_follow_up_is_rewritten_with_the_conversation_then_the_offline_queries(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = make_state(normalized_question="how long is the link valid?", language="en", history=HISTORY)
    writer, channel = make_writer()
    await QueryBuilder(llm=make_backend(), prompts=prompts).run(state, writer)

    events = await drain(channel)
    [usage] = [e for e in events if e["channel"] == "meta"]
    [status] = [e for e in events if e["channel"] == "status"]
    assert (status["stage"], status["query_source"]) == ("rewrite", "llm")
    assert usage["call"] == "rewrite" and state.usage.as_dict() == usage["usage"]
    assert 2 <= len(state.queries) <= 3
    assert state.search_query == state.queries[0] != "how long is the link valid?"
    assert "how long is the link valid?" in state.queries  # the offline query is searched too
    [recorded] = await sim.arequests()
    system = recorded["body"]["messages"][0]["content"]
    assert "User: How do I reset my password?" in system and "Assistant: Select Forgot password" in system
    assert state.loops == 0


async def test_retries_vary_the_queries_with_a_strategy_per_loop(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    node = QueryBuilder(llm=make_backend(), prompts=prompts)
    await node.run(state, writer)
    first = list(state.queries)
    await node.run(state, writer)
    second = list(state.queries)
    await node.run(state, writer)

    assert state.loops == 2
    assert not set(second) & set(first)
    events = await drain(channel)
    retries = [e for e in events if e["channel"] == "status"]
    assert [(e["loop"], e["strategy"], e["query_source"]) for e in retries] == [
        (1, "synonyms", "llm"),
        (2, "broader", "llm"),
    ]
    assert [e["call"] for e in events if e["channel"] == "meta"] == ["vary", "vary"]
    requests = [r["body"] for r in await sim.arequests()]
    assert ['strategy "synonyms"' in r["messages"][0]["content"] for r in requests] == [True, False]
    assert requests[0]["response_format"]["json_schema"]["schema"] == VARIATION_SCHEMA


async def test_a_variation_without_queries_falls_back_to_the_offline_strategy(
    canned: CannedFactory, prompts: CataloguePrompts
) -> None:
    llm, _ = await canned(json.dumps({"queries": ["  "]}))
    state = make_state(normalized_question="How do I reset my password?", language="en", queries=["x"])
    writer, channel = make_writer()
    await QueryBuilder(llm=llm, prompts=prompts).run(state, writer)

    events = await drain(channel)
    [retry] = [e for e in events if e["channel"] == "status"]
    assert (retry["strategy"], retry["query_source"], retry["fallback_reason"]) == (
        "key_terms",
        "rules_fallback",
        "invalid_output",
    )
    assert state.queries == ["reset password"]
    # The reply was received and paid for once, even though it was of no use.
    assert [e["usage"]["total_tokens"] for e in events if e["channel"] == "meta"] == [18]


async def test_unknown_retry_strategies_fail_when_the_node_is_built() -> None:
    try:
        QueryBuilder(strategies=("synonyms", "guess"))
    except ValueError as exc:
        assert "guess" in str(exc)
    else:
        raise AssertionError("expected a ValueError")
