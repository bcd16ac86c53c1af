"""Follow-up transforms with an LLM: followup_transform prepares, response_synth streams the model's version;
Traditional <-> Simplified stays offline."""

from __future__ import annotations

from typing import Any

from devtools.simulator.testing import SimulatorProcess
from rag.nodes.followup_transform import FollowupTransform
from rag.nodes.response_synth import EVERY_TURN, ResponseSynth
from rag.prompting.prompts import CataloguePrompts
from rag.state import PipelineState
from tests.rag.llm.conftest import BackendFactory
from tests.rag.nodes.support import answer_text, drain, history, make_state, make_writer

PREVIOUS = (
    "在登入頁面點選「忘記密碼」[1]。重設連結的有效時間為 30 分鐘[1]。帳號鎖住時請稍候 15 分鐘[2]。"
    "\n\n資料來源：\n[1] 如何重設密碼 (https://help.example/zh/pr)\n[2] 帳號被鎖住怎麼辦 (https://help.example/zh/lock)"
)


def followup_state(question: str, instruction: str) -> PipelineState:
    return make_state(
        question,
        normalized_question=question,
        language="zh-hant",
        intent="conversation_followup",
        should_retrieve=False,
        followup_instruction=instruction,
        previous_answer=PREVIOUS,
        history=history(("user", "忘記密碼怎麼辦？"), ("assistant", PREVIOUS)),
    )


async def run_both(state: PipelineState, llm: object, prompts: CataloguePrompts, **synth_params: Any) -> list[dict]:
    writer, channel = make_writer()
    await FollowupTransform(summary_chars=200, shorten_chars=400, llm=llm).run(state, writer)
    synth = ResponseSynth(
        stream_chunk_chars=5,
        forms_base_url="/forms/",
        forms_export_url="/export.csv",
        max_sentences=5,
        min_sentences=2,
        contact_zh="客服",
        contact_en="desk",
        llm=llm,
        prompts=prompts,
        **synth_params,
    )
    await synth.run(state, writer)
    return await drain(channel)


async def test_english_translation_is_streamed_from_the_translator(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = followup_state("翻成英文", "translate:en")
    events = await run_both(state, make_backend(), prompts)

    [prepare] = [e for e in events if e["stage"] == "prepare"]
    assert (prepare["node"], prepare["mode"], prepare["target_language"]) == ("followup_transform", "translate", "en")
    assert answer_text(events) == state.answer
    assert state.answer.endswith(
        "\n\nSources:\n[1] 如何重設密碼 (https://help.example/zh/pr)\n[2] 帳號被鎖住怎麼辦 (https://help.example/zh/lock)"
    )
    assert [s.ref for s in state.sources] == [1, 2]
    translate_request = (await sim.arequests())[0]["body"]
    system, user = translate_request["messages"]
    assert "English" in system["content"]
    assert user["content"] == PREVIOUS.split("\n\n")[0]  # the body only; the sources are listed by us
    assert [e["call"] for e in events if e["channel"] == "meta"] == ["answer"]
    # Two exchanges fit the history window the next turn's prompt carries word for word: no model summary yet.
    assert state.summary_job is None


async def test_simplified_chinese_stays_offline(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = followup_state("用簡體", "translate:zh-hans")
    events = await run_both(state, make_backend(), prompts, summary_when=EVERY_TURN)
    assert "在登入页面点选「忘记密码」[1]" in state.answer and answer_text(events) == state.answer
    # Nothing went to the model for the answer; only the running summary does, after the terminal event.
    assert await sim.arequests() == []
    assert state.summary_job is not None
    await state.summary_job()
    assert [r["body"]["messages"][0]["role"] for r in await sim.arequests()] == ["user"]


async def test_a_summary_is_a_rewrite_from_the_previous_answers_cited_sentences(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = followup_state("總結一下", "summarize")
    events = await run_both(state, make_backend(), prompts)

    [prepare] = [e for e in events if e["stage"] == "prepare"]
    assert prepare["mode"] == "rewrite"
    request = (await sim.arequests())[0]["body"]
    system = request["messages"][0]["content"]
    assert "[1] 如何重設密碼 — 在登入頁面點選「忘記密碼」[1]。 重設連結的有效時間為 30 分鐘[1]。" in system
    assert "[2] 帳號被鎖住怎麼辦 — 帳號鎖住時請稍候 15 分鐘[2]。" in system
    assert request["messages"][-1] == {"role": "user", "content": "總結一下\n\n(Summarise the previous answer.)"}
    assert request["messages"][-2]["role"] == "assistant"  # the previous answer, from the history
    assert answer_text(events) == state.answer and state.sources
