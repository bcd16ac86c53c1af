"""The semantic cache behind the real nodes: what reaches it, what comes back out, and a whole pipeline run."""

import asyncio

import pytest

from rag.deps import PipelineDeps
from rag.nodes import build_registry
from rag.nodes.cache_lookup import CacheLookup
from rag.nodes.cache_response import CacheResponse
from rag.nodes.cache_store import CacheStore
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.retriever import StoreRetriever
from rag.runtime import AskRequest, PipelineRuntime
from rag.semcache.models import CacheEntry
from rag.state import Source, Turn
from rag.workflows.default import default_workflow
from tests.rag.nodes.support import answer_text, drain, make_state, make_writer
from tests.rag.semcache.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)

SOURCE = Source(ref=1, doc_id="zh-password-reset", title="如何重設密碼", url="https://help.example/zh/password-reset")


def answered(question: str, **fields):
    base = dict(
        normalized_question=question,
        language="zh-hant",
        answer="在登入頁點選「忘記密碼」[1]。",
        sources=[SOURCE],
        retrieval_verdict="relevant",
    )
    base.update(fields)
    return make_state(question, **base)


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("那要多久？", "zh-hant"),
        ("這個要怎麼申請", "zh-hant"),
        ("How long does it take?", "en"),
        ("Make it shorter", "en"),
        # elliptical: no follow-up marker, the subject comes from the turn before
        ("學生呢？", "zh-hant"),
        ("要多少錢？", "zh-hant"),
        ("What about teachers?", "en"),
        ("How much?", "en"),
    ],
)
async def test_follow_ups_are_neither_looked_up_nor_stored(semantic_cache, question, language):
    history = [Turn("user", "如何重設密碼？"), Turn("assistant", "在登入頁點選「忘記密碼」[1]。")]
    state = answered(question, language=language, history=history)

    assert await CacheLookup(cache=semantic_cache, timeout=1.0).run(state, make_writer()[0]) == "miss"
    await CacheStore(cache=semantic_cache, timeout=1.0).run(state, make_writer()[0])
    assert await asyncio.to_thread(semantic_cache.wait_idle)

    assert state.cacheable is False
    assert await CacheEntry.objects.acount() == 0
    stats = semantic_cache.stats()
    assert (stats["hits"], stats["misses"], stats["stores"]) == (0, 0, 0)


@pytest.mark.parametrize(
    ("question", "language"),
    [("學生呢？", "zh-hant"), ("要多少錢？", "zh-hant"), ("What about teachers?", "en"), ("How much?", "en")],
)
async def test_an_answer_to_the_bare_words_is_not_served_mid_conversation(semantic_cache, question, language):
    # Asked with no conversation, the words are all there is: that answer may be cached and served to the next
    # person who asks them with no conversation, but never to one whose conversation gives them a subject.
    await remember(semantic_cache, question, language=language, answer="the answer to the words alone [1]")
    alone = make_state(question, normalized_question=question, language=language)
    assert await CacheLookup(cache=semantic_cache, timeout=1.0).run(alone, make_writer()[0]) == "hit"

    history = [Turn("user", "如何報名課程？"), Turn("assistant", "登入後在課程頁點選「報名」[1]。")]
    asked = make_state(question, normalized_question=question, language=language, history=history)
    assert await CacheLookup(cache=semantic_cache, timeout=1.0).run(asked, make_writer()[0]) == "miss"
    assert asked.cache_hit is None
    assert semantic_cache.stats()["hits"] == 1  # the second question never reached the cache


async def test_a_standalone_question_asked_mid_conversation_is_answered_from_the_cache(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？")
    history = [Turn("user", "如何報名課程？"), Turn("assistant", "登入後在課程頁點選「報名」[1]。")]
    state = make_state("密碼要怎麼重設？", normalized_question="密碼要怎麼重設？", language="zh-hant", history=history)
    assert await CacheLookup(cache=semantic_cache, timeout=1.0).run(state, make_writer()[0]) == "hit"
    assert state.cache_hit is not None and state.cache_hit["answer"] == "在登入頁點選「忘記密碼」[1]。"


async def test_a_stored_answer_is_found_for_a_paraphrase_and_streamed_in_chunks(semantic_cache):
    first = answered("如何重設密碼？")
    assert await CacheLookup(cache=semantic_cache, timeout=1.0).run(first, make_writer()[0]) == "miss"
    await CacheStore(cache=semantic_cache, timeout=1.0).run(first, make_writer()[0])
    assert await asyncio.to_thread(semantic_cache.wait_idle)

    second = make_state("密碼要怎麼重設？", normalized_question="密碼要怎麼重設？", language="zh-hant")
    assert await CacheLookup(cache=semantic_cache, timeout=1.0).run(second, make_writer()[0]) == "hit"
    writer, channel = make_writer()
    await CacheResponse(stream_chunk_chars=4).run(second, writer)

    events = await drain(channel)
    deltas = [e["delta"] for e in events if e["channel"] == "answer"]
    assert len(deltas) > 1 and all(len(d) <= 4 for d in deltas)
    assert answer_text(events) == first.answer == second.answer
    assert [s.as_dict() for s in second.sources] == [SOURCE.as_dict()]


async def test_the_default_workflow_answers_a_repeated_question_from_the_cache(semantic_cache, store):
    deps = PipelineDeps(retriever=StoreRetriever(store, LexicalEmbedder()), cache=semantic_cache)
    runtime = PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())

    async def ask(question: str) -> tuple[list[dict], dict]:
        run = await runtime.start(AskRequest(question=question))
        events = [event async for event in run.events()]
        assert events[-1]["channel"] == "meta_summary", events[-1]
        return events, events[-1]

    first_events, first = await ask("如何重設密碼？")
    assert first["cached"] is False and first["sources"]
    assert await asyncio.to_thread(semantic_cache.wait_idle)

    second_events, second = await ask("請問密碼要怎麼重設")

    assert second["cached"] is True
    assert answer_text(second_events) == answer_text(first_events)
    assert second["sources"] == first["sources"]
    nodes = {event["node"] for event in second_events}
    assert "cache_response" in nodes and "query_builder" not in nodes  # no retrieval, no synthesis
