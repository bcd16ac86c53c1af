import asyncio

import pytest

from rag.nodes.cache_lookup import CacheLookup
from tests.rag.nodes.support import history, make_state, make_writer

CONVERSATION = history(
    ("user", "How do I enrol in a course?"), ("assistant", "Open the course page and click Enrol [1].")
)


class FakeCache:
    def __init__(self, entry=None, *, delay=0.0, fail=False):
        self.entry = entry
        self.delay = delay
        self.fail = fail
        self.lookups = []

    async def lookup(self, question, *, language, producer=""):
        self.lookups.append((question, language))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("down")
        return self.entry

    async def store(self, question, *, language, answer, sources, producer=""):
        pass


async def test_without_a_cache_it_is_always_a_miss_but_cacheability_is_known():
    state = make_state(normalized_question="如何重設密碼?", language="zh-hant")
    assert await CacheLookup(cache=None, timeout=1).run(state, make_writer()[0]) == "miss"
    assert state.cacheable is True
    assert state.cache_hit is None


async def test_follow_ups_are_not_cacheable_and_not_looked_up():
    cache = FakeCache({"answer": "x", "sources": []})
    state = make_state(normalized_question="那要多久?", language="zh-hant")
    assert await CacheLookup(cache=cache, timeout=1).run(state, make_writer()[0]) == "miss"
    assert state.cacheable is False
    assert cache.lookups == []


@pytest.mark.parametrize(
    ("question", "language"),
    [("What about teachers?", "en"), ("How much?", "en"), ("學生呢？", "zh-hant"), ("要多少錢？", "zh-hant")],
)
async def test_mid_conversation_elliptical_questions_are_not_cacheable_and_not_looked_up(question, language):
    cache = FakeCache({"answer": "an answer to someone else's question", "sources": []})
    state = make_state(question, normalized_question=question, language=language, history=CONVERSATION)
    assert await CacheLookup(cache=cache, timeout=1).run(state, make_writer()[0]) == "miss"
    assert state.cacheable is False
    assert cache.lookups == []


async def test_without_history_the_same_words_are_context_free_and_looked_up():
    cache = FakeCache()
    state = make_state("How much?", normalized_question="How much?", language="en")
    assert await CacheLookup(cache=cache, timeout=1).run(state, make_writer()[0]) == "miss"
    assert state.cacheable is True
    assert cache.lookups == [("How much?", "en")]


async def test_mid_conversation_a_standalone_question_still_hits():
    entry = {"answer": "Click 'Forgot password' [1].", "sources": []}
    cache = FakeCache(entry)
    question = "How do I reset my password?"
    state = make_state(question, normalized_question=question, language="en", history=CONVERSATION)
    assert await CacheLookup(cache=cache, timeout=1).run(state, make_writer()[0]) == "hit"
    assert state.cacheable is True
    assert state.cache_hit == entry


async def test_hit_sets_the_entry():
    entry = {"answer": "重設步驟……", "sources": []}
    cache = FakeCache(entry)
    state = make_state(normalized_question="如何重設密碼?", language="zh-hant")
    assert await CacheLookup(cache=cache, timeout=1).run(state, make_writer()[0]) == "hit"
    assert state.cache_hit == entry
    assert cache.lookups == [("如何重設密碼?", "zh-hant")]


@pytest.mark.parametrize("cache", [FakeCache(delay=5), FakeCache(fail=True), FakeCache({"answer": ""})])
async def test_slow_broken_or_empty_cache_is_a_miss(cache):
    state = make_state(normalized_question="如何重設密碼?", language="zh-hant")
    assert await CacheLookup(cache=cache, timeout=0.05).run(state, make_writer()[0]) == "miss"


def test_a_cache_without_lookup_fails_at_build_time():
    with pytest.raises(TypeError, match="lookup"):
        CacheLookup(cache=object(), timeout=1)  # type: ignore[arg-type]  # the wrong type is the point
