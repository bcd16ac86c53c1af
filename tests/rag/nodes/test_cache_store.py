from rag.nodes.cache_store import CacheStore
from rag.state import Source
from tests.rag.nodes.support import make_state, make_writer


class RecordingCache:
    def __init__(self):
        self.stored = []

    async def lookup(self, question, *, language):
        return None

    async def store(self, question, *, language, answer, sources):
        self.stored.append((question, language, answer, sources))


def answered(**fields):
    base = dict(
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


async def test_does_not_store_follow_ups_fallbacks_or_unsourced_answers():
    cache = RecordingCache()
    node = CacheStore(cache=cache, timeout=1)
    for state in (answered(cacheable=False), answered(retrieval_verdict="fallback"), answered(sources=[])):
        await node.run(state, make_writer()[0])
    assert cache.stored == []
