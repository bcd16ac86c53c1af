"""An answer cut off by the LLM server is stored as failed, with the part the user already saw."""

from __future__ import annotations

import pytest

from chatbot import streaming
from chatbot.models import Message
from devtools.simulator.testing import SimulatorProcess
from tests.rag.llm.conftest import AttemptLog, attempts, manager  # noqa: F401 - fixtures, used by name
from tests.rag.pipeline.conftest import (  # noqa: F401 - fixtures, used by name
    RuntimeFactory,
    demo_retriever,
    make_runtime,
    pipeline_simulator,
    sim,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_drop_mid_answer_records_the_partial_answer_as_failed(
    make_runtime: RuntimeFactory,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
    attempts: AttemptLog,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Degraded answers off (RAG_DEGRADED_ANSWERS=false): the cut answer ends with its error. With them on, it is
    # finished from the passages instead (tests/rag/pipeline/test_degraded.py).
    runtime = make_runtime(degraded_answers=False)
    monkeypatch.setattr(streaming, "get_runtime", lambda: runtime)
    # The planner's call succeeds; the answer's connection is cut after 4 reasoning and 4 answer tokens.
    await sim.afaults(fail_next=["ok", "drop:8"])
    ask = streaming.ask_input_parse({"question": "How do I reset my password?"}, backend="chat", client_id="anon:t")
    exchange = await streaming.exchange_open(ask)

    events = [event async for event in exchange.events()]
    await streaming.pending_records()

    terminal = events[-1]
    assert (terminal["channel"], terminal["code"]) == ("error", "upstream_error")
    seen = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert seen
    answer = await Message.objects.aget(request_id=exchange.request_id, role=Message.Role.ASSISTANT)
    assert (answer.status, answer.error_code, answer.content) == ("failed", "upstream_error", seen)
    assert await Message.objects.filter(request_id=exchange.request_id).acount() == 2  # question + answer, once
    # The user saw part of the answer, so the dropped stream is not retried (a retry would start it over).
    assert attempts.outcomes == ["ok", "failed_mid_stream"]
    stats = await sim.astats()
    assert stats["endpoints"]["chat"]["attempts"] == 2 and stats["dropped"] == 1
