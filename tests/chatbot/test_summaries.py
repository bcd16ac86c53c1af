"""The conversation summary is written after the terminal event, and the next turn plans with it; by default the
model writes it only once the conversation outgrows the history the next turn sees word for word."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async

from chatbot import streaming, summaries
from chatbot.models import Conversation
from devtools.simulator.testing import SimulatorProcess
from rag.curated.index import CuratedAnswers
from rag.curated.services import curated_answer_create
from rag.engine import WorkflowDefinition
from rag.retrieval.embedding import LexicalEmbedder
from rag.runtime import PipelineRuntime
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


# A published workflow without response_synth: staff-approved answers only (curated_lookup, then cache_response).
CURATED_ONLY = {
    "name": "curated-only",
    "entry": "guard",
    "nodes": [
        {"id": name, "type": name, "params": {}}
        for name in ("guard", "language_normalizer", "curated_lookup", "cache_response")
    ],
    "edges": [
        {"source": "guard", "target": "language_normalizer", "route": "default"},
        {"source": "guard", "target": "END", "route": "blocked"},
        {"source": "language_normalizer", "target": "curated_lookup", "route": "default"},
        {"source": "curated_lookup", "target": "cache_response", "route": "hit"},
        {"source": "curated_lookup", "target": "END", "route": "miss"},
        {"source": "cache_response", "target": "END", "route": "default"},
    ],
}
CURATED = {
    "Can I bring a calculator to the exam?": "Write to the exam office; it approves calculators case by case.",
    "How do I download my certificate?": "Open My courses and choose Certificate under the finished course.",
    "Where do I change my e-mail address?": "Under Profile, choose Contact details and enter the new address.",
}


async def test_a_workflow_without_response_synth_keeps_the_conversation_summary(
    make_runtime: RuntimeFactory,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for question, answer in CURATED.items():
        await sync_to_async(curated_answer_create)(question=question, answer=answer, language="en")
    runtime = make_runtime()
    deps = await runtime.deps()
    deps.curated = curated = CuratedAnswers(embedder=LexicalEmbedder(dim=256))
    await sync_to_async(curated.sync)()
    try:
        await _curated_conversation(runtime, sim, monkeypatch)
    finally:
        await sync_to_async(curated.close)()


async def _curated_conversation(
    runtime: PipelineRuntime,
    sim: SimulatorProcess,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime.set_workflow("chat", WorkflowDefinition.from_dict(CURATED_ONLY))
    monkeypatch.setattr(streaming, "get_runtime", lambda: runtime)

    conversation_id = None
    stored: list[str] = []
    for question, answer in CURATED.items():
        fields = {"question": question} | ({"conversation_id": conversation_id} if conversation_id else {})
        exchange = await streaming.exchange_open(streaming.ask_input_parse(fields, backend="chat", client_id="anon:c"))
        events = [event async for event in exchange.events()]
        assert events[-1]["channel"] == "meta_summary" and events[-1]["curated"] is True
        assert "".join(e["delta"] for e in events if e["channel"] == "answer").startswith(answer)
        conversation_id = exchange.conversation_id
        await streaming.pending_records()
        await summaries.pending_summaries()
        stored.append((await Conversation.objects.aget(pk=conversation_id)).summary)

    # The offline summary of every turn while the history holds them all, then the model's (the default policy).
    assert stored[0].startswith("Q: Can I bring a calculator to the exam? A: Write to the exam office")
    assert stored[1].count("Q: ") == 2
    assert stored[2] and "Q: " not in stored[2]
    assert runtime._deps.answer_stats.stats()["summary_llm"] == 1
    # the model's one call: the summary (curated answers need none), built on the turns before
    requests = [r["body"] for r in await sim.arequests()]
    assert len(requests) == 1 and "Can I bring a calculator to the exam?" in str(requests[0]["messages"])
