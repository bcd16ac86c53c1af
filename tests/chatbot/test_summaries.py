"""The conversation summary is written after the terminal event, and the next turn plans with it; by default the
model writes it only once the conversation outgrows the history the next turn sees word for word."""

from __future__ import annotations

import time

import pytest

from chatbot import streaming, summaries
from chatbot.models import Conversation
from devtools.simulator.testing import SimulatorProcess
from tests.rag.llm.conftest import attempts, manager  # noqa: F401 - fixtures, used by name
from tests.rag.pipeline.conftest import (  # noqa: F401 - fixtures, used by name
    RuntimeFactory,
    demo_retriever,
    make_runtime,
    pipeline_simulator,
    sim,
)

pytestmark = pytest.mark.django_db(transaction=True)
SUMMARY_HANG = 2.0
EVERY_TURN = {"response_synth": {"summary_when": "every_turn"}}


async def test_the_stream_ends_before_the_summary_and_the_next_turn_gets_it(
    make_runtime: RuntimeFactory,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = make_runtime(node_params=EVERY_TURN)
    monkeypatch.setattr(streaming, "get_runtime", lambda: runtime)
    # planner and answer at once; the summary call waits SUMMARY_HANG seconds before the model answers it
    await sim.afaults(fail_next=["ok", "ok", f"hang:{SUMMARY_HANG}"])
    ask = streaming.ask_input_parse({"question": "How do I reset my password?"}, backend="chat", client_id="anon:s")
    exchange = await streaming.exchange_open(ask)
    started = time.monotonic()
    events = [event async for event in exchange.events()]
    ended = time.monotonic() - started

    assert events[-1]["channel"] == "meta_summary"
    assert [e["call"] for e in events if e["channel"] == "meta"] == ["plan", "answer"]
    conversation_id = exchange.conversation_id
    writing = summaries._pending.get(conversation_id)
    assert writing is not None and not writing.done()  # the terminal event went out while the summary was written
    assert ended < SUMMARY_HANG
    await streaming.pending_records()
    offline = (await Conversation.objects.aget(pk=conversation_id)).summary
    assert offline.startswith("Q: How do I reset my password?")  # stored with the exchange, before the model's

    # The next turn, asked at once, waits for the summary being written and plans with it.
    follow = streaming.ask_input_parse(
        {"question": "How long is the link valid?", "conversation_id": conversation_id},
        backend="chat",
        client_id="anon:s",
    )
    second = await streaming.exchange_open(follow)
    assert writing.done()
    stored = (await Conversation.objects.aget(pk=conversation_id)).summary
    assert stored and stored != offline and "Q: " not in stored  # the model's
    [event async for event in second.events()]
    await streaming.pending_records()
    await summaries.pending_summaries()
    requests = [r["body"] for r in await sim.arequests()]
    planner = requests[3]  # plan, answer, summary of the first turn; then the second turn's plan
    assert stored in str(planner["messages"])
    assert runtime._deps.answer_stats.stats()["summary_llm"] == 2


async def test_the_model_summary_waits_for_the_turn_that_pushes_a_message_out_of_the_history_window(
    make_runtime: RuntimeFactory,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = make_runtime()  # the default workflow: response_synth keeps four messages word for word
    monkeypatch.setattr(streaming, "get_runtime", lambda: runtime)
    conversation_id = None
    summaries_after: list[int] = []
    for question in ("How do I reset my password?", "How long is the link valid?", "Can I change my e-mail?"):
        fields = {"question": question} | ({"conversation_id": conversation_id} if conversation_id else {})
        exchange = await streaming.exchange_open(streaming.ask_input_parse(fields, backend="chat", client_id="anon:w"))
        events = [event async for event in exchange.events()]
        assert events[-1]["channel"] == "meta_summary"
        conversation_id = exchange.conversation_id
        await streaming.pending_records()
        await summaries.pending_summaries()
        summaries_after.append(runtime._deps.answer_stats.stats()["summary_llm"])
        stored = (await Conversation.objects.aget(pk=conversation_id)).summary
        if len(summaries_after) < 3:
            assert stored.count("Q: ") == len(summaries_after)  # the offline summary of every turn so far

    # No summary call while two exchanges fit; the third pushes the first out, and its summary is the model's.
    assert summaries_after == [0, 0, 1]
    assert stored and "Q: " not in stored
