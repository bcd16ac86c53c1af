"""language_normalizer with an LLM: questions in other languages are translated for the search; a failed
translation keeps the question as asked and says so."""

from __future__ import annotations

from devtools.simulator.testing import SimulatorProcess
from rag.nodes.language_normalizer import LanguageNormalizer
from rag.prompting.prompts import CataloguePrompts
from tests.rag.llm.conftest import BackendFactory
from tests.rag.nodes.support import drain, make_state, make_writer

QUESTION = "Comment réinitialiser mon mot de passe ?"


def node(llm: object, prompts: CataloguePrompts, **kwargs: object) -> LanguageNormalizer:
    return LanguageNormalizer(default_language="zh-hant", llm=llm, prompts=prompts, **kwargs)  # type: ignore[arg-type]


async def test_other_language_is_translated_into_english_for_the_search(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = make_state(QUESTION)
    writer, channel = make_writer()
    await node(make_backend(), prompts).run(state, writer)

    assert state.language == "other"  # the answer is still written in the asker's language
    assert state.normalized_question and state.normalized_question != QUESTION
    events = await drain(channel)
    [status] = [e for e in events if e["channel"] == "status"]
    assert (status["stage"], status["translated"], status["target_language"]) == ("translate", True, "en")
    [usage] = [e for e in events if e["channel"] == "meta"]
    assert usage["call"] == "translate" and state.usage.as_dict() == usage["usage"]
    [recorded] = await sim.arequests()
    system, user = recorded["body"]["messages"]
    assert "English" in system["content"] and user == {"role": "user", "content": QUESTION}


async def test_a_failed_translation_keeps_the_question_and_says_so(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    await sim.afaults(fail_next=["500", "500"])
    state = make_state(QUESTION)
    writer, channel = make_writer()
    await node(make_backend(max_attempts=2), prompts).run(state, writer)

    assert (state.language, state.normalized_question) == ("other", QUESTION)
    [status] = await drain(channel)
    assert (status["translated"], status["fallback_reason"]) == (False, "upstream_error")
    assert state.usage.total_tokens == 0


async def test_chinese_and_english_need_no_model(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    llm = make_backend()
    for question in ("软件下载不了怎么办？", "How do I reset my password?"):
        state = make_state(question)
        writer, channel = make_writer()
        await node(llm, prompts).run(state, writer)
        assert await drain(channel) == []
    assert state.normalized_question == "How do I reset my password?"
    assert (await sim.astats())["attempts"] == 0


async def test_english_is_translated_for_a_chinese_corpus_when_asked(
    make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    state = make_state("How do I reset my password?")
    writer, channel = make_writer()
    await node(make_backend(), prompts, translate_english=True).run(state, writer)
    assert state.language == "en"
    [usage, status] = await drain(channel)
    assert usage["channel"] == "meta"
    assert (status["target_language"], status["translated"]) == ("zh-hant", True)
