import asyncio

from rag.branding.texts import DEFAULT_EN, DEFAULT_ZH, FixedOrganisation, LocalTexts, Organisation
from rag.deps import PipelineConfig
from rag.nodes.response_synth import ResponseSynth
from tests.rag.chunk_fixtures import ENROL_EN, FORM_ACCOUNT, FORM_HOURS, PASSWORD_EN, PASSWORD_ZH
from tests.rag.nodes.support import answer_text, drain, make_state, make_writer

CONFIG = PipelineConfig(stream_chunk_chars=5, forms_base_url="/forms/", forms_export_url="/api/forms.csv")


def synth() -> ResponseSynth:
    return ResponseSynth(
        stream_chunk_chars=CONFIG.stream_chunk_chars,
        forms_base_url=CONFIG.forms_base_url,
        forms_export_url=CONFIG.forms_export_url,
        max_sentences=5,
        min_sentences=2,
        contact_zh="客服 02-0000",
        contact_en="call 02-0000",
    )


async def run(state):
    writer, channel = make_writer()
    assert await synth().run(state, writer) is None
    return await drain(channel)


async def test_extractive_answer_is_streamed_in_small_deltas_with_citations_and_sources():
    state = make_state(
        normalized_question="How do I reset my password?",
        language="en",
        intent="simple_faq",
        retrieved=[PASSWORD_EN, ENROL_EN],
        retrieval_verdict="relevant",
    )
    events = await run(state)
    deltas = [e["delta"] for e in events if e["channel"] == "answer"]
    assert all(e["node"] == "response_synth" for e in events)
    assert max(len(d) for d in deltas) == 5
    assert answer_text(events) == state.answer
    assert "[1]" in state.answer
    assert "\n\nSources:\n[1] How do I reset my password (https://help.example/en/password-reset)" in state.answer
    assert [s.ref for s in state.sources] == [1]
    assert 2 <= state.answer.count("[1]") - 1 <= 5  # sentences cited, minus the sources line


async def test_chinese_answer_uses_chinese_labels():
    state = make_state(
        normalized_question="如何重設密碼?",
        language="zh-hans",
        intent="simple_faq",
        retrieved=[PASSWORD_ZH],
        retrieval_verdict="relevant",
    )
    await run(state)
    assert "\n\n資料來源：\n[1] 如何重設密碼" in state.answer


async def test_out_of_scope_reply_in_the_question_language():
    state = make_state(
        normalized_question="Tell me a joke", language="en", intent="out_of_scope", should_retrieve=False
    )
    events = await run(state)
    assert state.answer == DEFAULT_EN.out_of_scope
    assert answer_text(events) == state.answer
    assert state.sources == []
    state = make_state(
        normalized_question="今天天氣如何", language="zh-hant", intent="out_of_scope", should_retrieve=False
    )
    await run(state)
    assert state.answer == DEFAULT_ZH.out_of_scope


ACME_EN = LocalTexts(
    name="Acme Help",
    tagline="",
    welcome="",
    contact="write to help@acme.example",
    out_of_scope="Acme Help answers questions about Acme's library only.",
)


async def test_refusals_use_the_organisations_own_contact_and_scope_when_no_contact_is_configured():
    node = ResponseSynth(
        stream_chunk_chars=5,
        forms_base_url="/forms/",
        forms_export_url="/api/forms.csv",
        max_sentences=5,
        min_sentences=2,
        contact_zh="",
        contact_en="",
        organisation=FixedOrganisation(Organisation(en=ACME_EN)),
    )
    state = make_state(
        normalized_question="Tell me a joke", language="en", intent="out_of_scope", should_retrieve=False
    )
    await node.run(state, make_writer()[0])
    assert state.answer == ACME_EN.out_of_scope
    state = make_state(normalized_question="Where is the moon?", language="en", intent="simple_faq", retrieved=[])
    await node.run(state, make_writer()[0])
    assert "write to help@acme.example" in state.answer
    state = make_state(normalized_question="今天天氣如何", language="zh-hant", intent="simple_faq", retrieved=[])
    await node.run(state, make_writer()[0])
    assert DEFAULT_ZH.contact in state.answer  # the Chinese words were left neutral


async def test_no_chunks_is_an_honest_not_found_with_contact():
    state = make_state(
        normalized_question="量子力學是什麼", language="zh-hant", intent="simple_faq", retrieval_verdict="fallback"
    )
    await run(state)
    assert "找不到" in state.answer
    assert "客服 02-0000" in state.answer
    assert state.sources == []


async def test_form_download_lists_links_and_attachments():
    state = make_state(
        normalized_question="時數補登申請表在哪裡下載",
        language="zh-hant",
        intent="form_download",
        retrieved=[FORM_HOURS, FORM_ACCOUNT],
        retrieval_verdict="relevant",
    )
    await run(state)
    assert "[下載](/forms/F-101.pdf)" in state.answer
    assert [a.url for a in state.attachments] == ["/forms/F-101.pdf"]
    assert state.sources[0].as_dict()["download_url"] == "/forms/F-101.pdf"


async def test_form_export_links_the_csv():
    state = make_state(
        normalized_question="匯出時數補登表單",
        language="zh-hant",
        intent="form_export",
        retrieved=[FORM_HOURS, FORM_ACCOUNT],
        retrieval_verdict="relevant",
    )
    await run(state)
    [attachment] = state.attachments
    assert (attachment.name, attachment.url, attachment.media_type) == (
        "forms.csv",
        "/api/forms.csv?ids=F-101",
        "text/csv",
    )
    assert "/api/forms.csv?ids=F-101" in state.answer


async def test_a_prepared_answer_is_only_streamed():
    state = make_state(normalized_question="簡短一點", answer="第一句[1]。", intent="conversation_followup")
    events = await run(state)
    assert answer_text(events) == "第一句[1]。"
    assert state.answer == "第一句[1]。"


async def test_summary_grows_from_the_previous_one():
    state = make_state(
        normalized_question="How do I reset my password?",
        language="en",
        intent="simple_faq",
        retrieved=[PASSWORD_EN],
        retrieval_verdict="relevant",
        summary="Q: earlier A: something.",
    )
    await run(state)
    assert state.new_summary.startswith("Q: earlier A: something. Q: How do I reset my password? A: ")
    assert "[1]" not in state.new_summary


async def test_streaming_lets_other_tasks_run():
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    state = make_state(normalized_question="x", answer="字" * 500, intent="conversation_followup")
    await run(state)
    task.cancel()
    assert ticks > 5
