from typing import Any

import pytest

from rag.nodes.cache_store import CacheStore
from rag.state import Source
from tests.rag.nodes.support import InMemoryRetriever, history, make_state, make_writer

CONVERSATION = history(("user", "如何報名課程？"), ("assistant", "登入後在課程頁點選「報名」[1]。"))


class RecordingCache:
    def __init__(self):
        self.stored = []

    async def lookup(self, question, *, language, producer=""):
        return None

    async def store(self, question, *, language, answer, sources, producer=""):
        self.stored.append((question, language, answer, sources))


def answered(**fields):
    base: dict[str, Any] = dict(
        normalized_question="如何重設密碼?",
        language="zh-hant",
        answer="步驟[1]。",
        sources=[Source(ref=1, doc_id="d", title="t", url="u")],
        cacheable=True,
        retrieval_verdict="relevant",
    )
    base.update(fields)
    return make_state(**base)


async def test_without_a_cache_it_passes_through():
    assert await CacheStore(cache=None, timeout=1).run(answered(), make_writer()[0]) is None


async def test_stores_a_grounded_context_free_answer():
    cache = RecordingCache()
    await CacheStore(cache=cache, timeout=1).run(answered(), make_writer()[0])
    assert cache.stored == [
        ("如何重設密碼?", "zh-hant", "步驟[1]。", [{"ref": 1, "doc_id": "d", "title": "t", "url": "u"}])
    ]


async def test_does_not_store_follow_ups_fallbacks_unsourced_or_degraded_answers():
    cache = RecordingCache()
    node = CacheStore(cache=cache, timeout=1)
    for state in (
        answered(cacheable=False),
        answered(retrieval_verdict="fallback"),
        answered(sources=[]),
        answered(degraded=True),  # a stand-in for the model's answer while it is down
    ):
        await node.run(state, make_writer()[0])
    assert cache.stored == []


@pytest.mark.parametrize(
    ("question", "language"),
    [("What about teachers?", "en"), ("How much?", "en"), ("學生呢？", "zh-hant"), ("要多少錢？", "zh-hant")],
)
async def test_mid_conversation_elliptical_questions_are_not_stored_even_if_marked_cacheable(question, language):
    cache = RecordingCache()
    state = answered(normalized_question=question, language=language, history=CONVERSATION, queries=[question])
    await CacheStore(cache=cache, timeout=1).run(state, make_writer()[0])
    assert cache.stored == []


async def test_mid_conversation_a_standalone_question_answered_from_its_own_words_is_stored():
    cache = RecordingCache()
    state = answered(history=CONVERSATION, intent="simple_faq", search_query="如何重設密碼?", queries=["重設密碼"])
    await CacheStore(cache=cache, timeout=1).run(state, make_writer()[0])
    assert [stored[0] for stored in cache.stored] == ["如何重設密碼?"]


async def test_mid_conversation_an_answer_that_used_the_history_is_not_stored():
    cache = RecordingCache()
    node = CacheStore(cache=cache, timeout=1)
    for state in (
        # the query builder rewrote it with the conversation's subject (課程)
        answered(history=CONVERSATION, search_query="重設課程帳號密碼", queries=["重設課程帳號密碼", "重設密碼"]),
        # the planner read it as being about the conversation
        answered(history=CONVERSATION, intent="conversation_followup", followup_instruction="elaborate"),
        answered(summary="使用者詢問報名課程。", intent="conversation_followup"),
    ):
        await node.run(state, make_writer()[0])
    assert cache.stored == []


async def test_mid_conversation_an_answer_written_by_a_model_that_read_the_history_is_not_stored():
    cache = RecordingCache()
    node = CacheStore(cache=cache, timeout=1, answer_saw_history=True)
    await node.run(answered(history=CONVERSATION, queries=["重設密碼"]), make_writer()[0])
    assert cache.stored == []
    await node.run(answered(queries=["重設密碼"]), make_writer()[0])  # no conversation: nothing else to read
    assert [stored[0] for stored in cache.stored] == ["如何重設密碼?"]


def test_the_answer_counts_as_written_with_the_history_when_the_pipeline_has_an_llm():
    from rag.deps import PipelineDeps
    from rag.nodes.cache_store import NODE_TYPE

    offline = NODE_TYPE.factory(PipelineDeps(retriever=InMemoryRetriever(), cache=RecordingCache()), {"timeout": 1.0})
    with_llm = NODE_TYPE.factory(
        PipelineDeps(retriever=InMemoryRetriever(), cache=RecordingCache(), llm=object()), {"timeout": 1.0}
    )
    assert isinstance(offline, CacheStore) and isinstance(with_llm, CacheStore)
    assert (offline._answer_saw_history, with_llm._answer_saw_history) == (False, True)
