"""response_synth with an LLM: the answer streamed token by token from numbered sources, reasoning on its own
channel, only cited sources kept, every call's usage emitted and summed, the summary allowed to fail."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.branding.texts import DEFAULT_EN
from rag.deps import PipelineConfig
from rag.errors import UpstreamError
from rag.nodes.response_synth import EVERY_TURN, WINDOW_FULL, ResponseSynth
from rag.prompting.prompts import CataloguePrompts
from rag.rules import messages
from rag.state import RetrievedChunk
from tests.rag.chunk_fixtures import ENROL_EN, FORM_ACCOUNT, FORM_HOURS, PASSWORD_EN
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory
from tests.rag.nodes.support import answer_text, drain, history, make_state, make_writer
from tests.waiting import until

CONFIG = PipelineConfig(stream_chunk_chars=5, forms_base_url="/forms/", forms_export_url="/api/forms.csv")


def synth(llm: object, prompts: object, **kwargs: object) -> ResponseSynth:
    """The node writing the model's summary after every turn, unless a test says otherwise: these tests are about
    the summary call itself (its window rule has tests of its own)."""
    kwargs.setdefault("summary_when", EVERY_TURN)
    return ResponseSynth(
        stream_chunk_chars=CONFIG.stream_chunk_chars,
        forms_base_url=CONFIG.forms_base_url,
        forms_export_url=CONFIG.forms_export_url,
        max_sentences=5,
        min_sentences=2,
        contact_zh="客服 02-0000",
        contact_en="call 02-0000",
        llm=llm,
        prompts=prompts,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def faq_state(**fields: object):
    base: dict[str, Any] = {
        "normalized_question": "How do I reset my password?",
        "language": "en",
        "intent": "simple_faq",
        "retrieved": [PASSWORD_EN, ENROL_EN],
        "retrieval_verdict": "relevant",
        "summary": "The user asked about logging in.",
    }
    base.update(fields)
    return make_state(base["normalized_question"], **base)


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_answer_is_streamed_with_reasoning_cited_sources_and_usage(
    backend: str, make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = faq_state(backend=backend)
    writer, channel = make_writer()
    await synth(make_backend(), prompts).run(state, writer)

    events = await drain(channel)
    answer_deltas = [e for e in events if e["channel"] == "answer"]
    reasoning = [e for e in events if e["channel"] == "reasoning"]
    assert len(answer_deltas) > 5 and len(reasoning) == 4  # token by token (the simulator thinks 4 tokens)
    assert events.index(reasoning[-1]) < events.index(answer_deltas[0])
    assert answer_text(events) == state.answer
    # The simulator cites every numbered source it was given: [1] and [2], listed under those numbers.
    assert [s.ref for s in state.sources] == [1, 2]
    assert [s.doc_id for s in state.sources] == ["en-password-reset", "en-enrolment"]
    assert state.answer.endswith(
        "\n\nSources:\n[1] How do I reset my password (https://help.example/en/password-reset)\n"
        "[2] How to enrol in a course (https://help.example/en/enrolment)"
    )
    usages = [e for e in events if e["channel"] == "meta"]
    assert [e["call"] for e in usages] == ["answer"]  # the summary is written after the terminal event
    total = {key: sum(e["usage"][key] for e in usages) for key in ("input_tokens", "output_tokens", "total_tokens")}
    assert state.usage.as_dict() == total and total["total_tokens"] > 0
    assert state.new_summary.startswith("The user asked about logging in. Q: ")  # the offline one, at once
    assert state.summary_job is not None
    summary = await state.summary_job()
    assert summary and "Q: " not in summary  # written by the model, not the offline rule
    answer_request, summary_request = [r["body"] for r in await sim.arequests()]
    system = answer_request["messages"][0]["content"] if backend == "chat" else answer_request["instructions"]
    assert "[1] How do I reset my password — If you have forgotten your password" in system
    assert "The user asked about logging in." in system and "Reply language: en" in system
    assert answer_request["stream"] is True
    assert "conversation" in str(summary_request).lower()


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_earlier_turns_go_between_the_instructions_and_the_question_in_order(
    backend: str, make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    earlier = history(
        ("user", "Where do I log in?"),
        ("assistant", "Use the Log in button at the top right [1]."),
        ("user", "It says my password is wrong."),
        ("assistant", "Check that Caps Lock is off, then try again."),
    )
    state = faq_state(backend=backend, history=earlier)
    await synth(make_backend(), prompts).run(state, make_writer()[0])

    answer_request = (await sim.arequests())[0]["body"]
    turns = [{"role": turn.role, "content": turn.content} for turn in earlier]
    if backend == "chat":
        [system, *middle, question] = answer_request["messages"]
        assert system["role"] == "system" and "Reply language: en" in system["content"]
    else:  # the Responses API carries the system prompt as `instructions`, the conversation as `input`
        assert "Reply language: en" in answer_request["instructions"]
        [*middle, question] = answer_request["input"]
    assert middle == turns
    assert question["role"] == "user" and "How do I reset my password?" in question["content"]


async def test_only_cited_forms_become_sources_and_attachments(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = faq_state(
        normalized_question="時數補登申請表在哪裡下載",
        language="zh-hant",
        intent="form_download",
        retrieved=[FORM_HOURS, FORM_ACCOUNT],
    )
    await synth(make_backend(), prompts, max_sources=1).run(state, make_writer()[0])
    assert [(s.ref, s.kind, s.download_url) for s in state.sources] == [(1, "form", "/forms/F-101.pdf")]
    assert [(a.name, a.url) for a in state.attachments] == [("F-101.pdf", "/forms/F-101.pdf")]
    assert "資料來源：\n[1] 時數補登申請表" in state.answer
    [answer_request] = [r["body"] for r in await sim.arequests()]
    assert "(form F-101, download: /forms/F-101.pdf)" in answer_request["messages"][0]["content"]


async def test_fixed_replies_stay_offline_but_the_summary_is_written(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = faq_state(normalized_question="Tell me a joke", intent="out_of_scope", should_retrieve=False, retrieved=[])
    writer, channel = make_writer()
    await synth(make_backend(), prompts).run(state, writer)
    assert state.answer == DEFAULT_EN.out_of_scope
    assert [e["call"] for e in await drain(channel) if e["channel"] == "meta"] == []
    assert (await sim.astats())["attempts"] == 0
    assert state.summary_job is not None
    assert await state.summary_job() != state.new_summary  # the model's
    assert (await sim.astats())["attempts"] == 1


async def test_while_the_conversation_fits_the_history_window_only_the_offline_summary_is_written(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    # One earlier exchange and this one: the next turn's prompt carries all four messages word for word.
    state = faq_state(history=history(("user", "How do I log in?"), ("assistant", "Use your e-mail address.")))
    await synth(make_backend(), prompts, summary_when=WINDOW_FULL).run(state, make_writer()[0])
    assert state.answer and state.summary_job is None
    assert state.new_summary.startswith("The user asked about logging in. Q: How do I reset my password? A: ")
    assert (await sim.astats())["attempts"] == 1  # the answer alone


@pytest.mark.parametrize(
    ("earlier", "history_chars"),
    [
        # a third exchange: the first leaves the four messages the next turn sees
        (
            (
                ("user", "How do I log in?"),
                ("assistant", "Use your e-mail."),
                ("user", "And then?"),
                ("assistant", "Go."),
            ),
            1500,
        ),
        # a first exchange whose answer is longer than the history keeps of a message
        ((), 40),
    ],
    ids=["a-turn-leaves-the-window", "the-answer-is-clipped"],
)
async def test_the_model_summary_is_written_once_the_history_window_no_longer_holds_the_conversation(
    earlier: tuple[tuple[str, str], ...],
    history_chars: int,
    make_backend: BackendFactory,
    sim: SimulatorProcess,
    prompts: CataloguePrompts,
) -> None:
    state = faq_state(history=history(*earlier))
    node = synth(make_backend(), prompts, summary_when=WINDOW_FULL, history_turns=4, history_chars=history_chars)
    await node.run(state, make_writer()[0])
    assert state.summary_job is not None
    assert await state.summary_job() != state.new_summary  # the model's
    assert (await sim.astats())["attempts"] == 2


async def test_a_failed_summary_keeps_the_answer(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    await sim.afaults(fail_next=["ok", "500", "500"])
    state = faq_state()
    writer, channel = make_writer()
    await synth(make_backend(max_attempts=2), prompts).run(state, writer)
    events = await drain(channel)
    assert state.answer and answer_text(events) == state.answer
    assert state.new_summary.startswith("The user asked about logging in. Q: How do I reset my password? A: ")
    assert [e["call"] for e in events if e["channel"] == "meta"] == ["answer"]
    assert state.summary_job is not None
    assert await state.summary_job() == state.new_summary  # the model failed: the offline summary is kept
    assert (await sim.astats())["attempts"] == 3


async def test_with_degraded_answers_off_an_upstream_failure_is_the_requests_failure(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog, prompts: CataloguePrompts
) -> None:
    await sim.afaults(fail_next=["500", "500"])
    with pytest.raises(UpstreamError, match="HTTP 500, 2 attempt"):
        await synth(make_backend(max_attempts=2), prompts, degraded_answers=False).run(faq_state(), make_writer()[0])
    assert attempts.count == 2


async def test_an_upstream_failure_of_the_answer_is_answered_from_the_passages(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog, prompts: CataloguePrompts
) -> None:
    await sim.afaults(fail_next=["500", "500"])
    state = faq_state()
    writer, channel = make_writer()
    await synth(make_backend(max_attempts=2), prompts).run(state, writer)
    events = await drain(channel)
    assert state.degraded and attempts.count == 2
    assert state.answer.startswith(messages.text("degraded", state.language)) and "[1]" in state.answer
    assert answer_text(events) == state.answer
    generate = [e for e in events if e["channel"] == "status" and e["stage"] == "generate"]
    assert (generate[-1]["answer_source"], generate[-1]["fallback_reason"]) == ("degraded", "upstream_error")


async def test_an_unavailable_prompt_gives_the_offline_answer(
    make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    class Broken:
        async def get(self, name: str) -> object:
            raise RuntimeError("registry down")

    state = faq_state()
    writer, channel = make_writer()
    await synth(make_backend(), Broken()).run(state, writer)
    events = await drain(channel)
    assert "[1]" in state.answer and answer_text(events) == state.answer
    generate = [e for e in events if e["channel"] == "status" and e["stage"] == "generate"]
    assert (generate[0]["answer_source"], generate[0]["fallback_reason"]) == ("rules_fallback", "prompt_unavailable")
    assert (await sim.astats())["attempts"] == 0


async def test_cancelling_mid_answer_closes_the_upstream_stream(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    # The answer stalls for 30 s after two tokens: the client leaves before that.
    await sim.afaults(fail_next=["stall:2:30"])
    writer, channel = make_writer()
    task = asyncio.create_task(synth(make_backend(), prompts).run(faq_state(), writer))
    event = await channel.get(5.0)
    while event["channel"] == "status":
        event = await channel.get(5.0)
    assert event["channel"] == "reasoning"
    assert (await sim.astats())["running"] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The `sim` and `manager` fixtures check, after the test, that nothing runs upstream and no slot is held.


async def test_the_summary_call_yields_its_slot_to_an_answer_that_queued_after_it(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager, prompts: CataloguePrompts
) -> None:
    state = faq_state(normalized_question="Tell me a joke", intent="out_of_scope", should_retrieve=False, retrieved=[])
    backend = make_backend()
    await synth(backend, prompts).run(state, make_writer()[0])
    assert state.summary_job is not None
    manager.set_limit("chat", 1)
    order: list[str] = []

    async def summary() -> None:
        assert state.summary_job is not None
        assert await state.summary_job() != state.new_summary  # the model's, once the answer is done
        order.append("summary")

    async def answer() -> None:
        await backend.stream_text(backend="chat", node="answer", messages=USER)
        order.append("answer")

    held = manager.acquire("chat")
    await held.__aenter__()  # a third request's answer holds the only slot
    tasks = [asyncio.create_task(summary())]
    await until(lambda: manager.stats()["backends"]["chat"]["waiting"] == 1)
    tasks.append(asyncio.create_task(answer()))
    await until(lambda: manager.stats()["backends"]["chat"]["waiting"] == 2)
    await held.__aexit__(None, None, None)
    await asyncio.gather(*tasks)
    assert order == ["answer", "summary"]
    assert (await sim.astats())["attempts"] == 2


async def test_a_summary_that_gets_no_slot_in_time_keeps_the_offline_one_and_counts_a_skip(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager, prompts: CataloguePrompts
) -> None:
    state = faq_state(normalized_question="Tell me a joke", intent="out_of_scope", should_retrieve=False, retrieved=[])
    await synth(make_backend(), prompts, summary_slot_wait=0.05).run(state, make_writer()[0])
    assert state.summary_job is not None
    manager.set_limit("chat", 1)
    async with manager.acquire("chat"):
        assert await state.summary_job() == state.new_summary
    assert (await sim.astats())["attempts"] == 0
    assert manager.stats()["auxiliary_skipped"] == {"summary": 1}


FEES_ZH = RetrievedChunk(
    chunk_id="zh-audit-fees#0",
    doc_id="zh-audit-fees",
    title="旁聽收費標準",
    url="https://uni.example/zh-audit-fees",
    text=(
        "旁聽生依身分收費，每門課按學期計費。\n\n| 身分 | 每門課費用 | 備註 |\n| --- | --- | --- |\n"
        "| 本校學生 | 免費 | 需經授課教師同意 |\n| 本校校友 | 1,000 元 | 需出示校友證 |\n"
        "| 校外人士 | 2,500 元 | 需於開課前兩週申請 |\n| 高中生 | 500 元 | 需家長同意書 |"
    ),
    score=1.0,
    language="zh-hant",
)


async def test_the_model_reads_the_row_asked_about_under_its_header(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    question = "校外人士旁聽一門課要多少錢？"
    state = faq_state(normalized_question=question, language="zh-hant", retrieved=[FEES_ZH, PASSWORD_EN])
    await synth(make_backend(), prompts, summary_when=WINDOW_FULL).run(state, make_writer()[0])
    answer_request = (await sim.arequests())[0]["body"]
    system = answer_request["messages"][0]["content"]
    table = "| 身分 | 每門課費用 | 備註 |\n| --- | --- | --- |\n| 校外人士 | 2,500 元 | 需於開課前兩週申請 |"
    assert f"[1] 旁聽收費標準 — 旁聽生依身分收費，每門課按學期計費。\n\n{table}" in system
    assert "本校校友" not in system and "高中生" not in system


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_what_retrieval_did_not_find_is_refused_as_offline_without_asking_the_model(
    backend: str, make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    # retrieval returned passages, but the checker found none relevant (its `fallback` route)
    question = "Who won the 2022 FIFA World Cup?"
    with_llm = faq_state(normalized_question=question, retrieval_verdict="fallback", backend=backend)
    offline = faq_state(normalized_question=question, retrieval_verdict="fallback", backend=backend)
    writer, channel = make_writer()
    await synth(make_backend(), prompts).run(with_llm, writer)
    await synth(None, prompts).run(offline, make_writer()[0])

    events = await drain(channel)
    assert with_llm.answer == offline.answer
    assert with_llm.answer.startswith(messages.text("no_answer", "en", contact="call 02-0000").split(":")[0])
    assert "call 02-0000" in with_llm.answer  # the way to a human
    assert not [e for e in events if e["channel"] in ("reasoning", "meta")]
    assert await sim.arequests() == []  # the model was not asked for the answer
