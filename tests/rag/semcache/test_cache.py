import asyncio

import numpy as np
import pytest

from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import load_markdown_dir
from rag.semcache.cache import embed_key
from rag.semcache.guard import question_normalize
from rag.semcache.models import CacheEntry, CacheEntryDocument
from rag.semcache.services import cache_entries_invalidate_for_documents
from tests.rag.semcache.conftest import ENROL_SOURCES, PASSWORD_SOURCES, PromptVersions, remember
from tests.waiting import until

# The writer thread has its own database connection: it must see committed rows, and the test must see its.
pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "在登入頁點選「忘記密碼」[1]。"


async def test_a_paraphrase_gets_the_stored_answer_and_its_sources(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？")

    entry = await semantic_cache.lookup("密碼要怎麼重設", language="zh-hant")

    assert entry == {"answer": ANSWER, "sources": PASSWORD_SOURCES}
    assert semantic_cache.stats()["hits"] == 1


async def test_an_unrelated_question_misses(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？")

    assert await semantic_cache.lookup("如何報名課程", language="zh-hant") is None
    stats = semantic_cache.stats()
    assert (stats["hits"], stats["misses"], stats["guard_rejections"]) == (0, 1, 0)


async def test_the_threshold_decides_how_close_is_close_enough(make_cache, embedder):
    stored, asked = "How do I reset my password?", "What are the steps to reset my password?"
    vectors = [embedder.embed_query(embed_key(question_normalize(q))) for q in (stored, asked)]
    similarity = float(np.dot(*vectors))
    assert 0.5 < similarity < 0.65  # a paraphrase the default threshold leaves out

    lenient = make_cache(threshold=similarity - 0.01)
    await remember(lenient, stored, language="en")
    assert await lenient.lookup(asked, language="en") is not None
    await asyncio.to_thread(lenient.close)

    strict = make_cache(threshold=similarity + 0.01)  # reads the same entry back from the collection
    assert await strict.lookup(asked, language="en") is None
    assert await strict.lookup(stored, language="en") is not None


@pytest.mark.parametrize(
    ("language", "stored", "asked", "reason"),
    [
        ("zh-hant", "如何重設密碼", "如何不重設密碼", "negation"),
        ("en", "Can I withdraw from an online course?", "Can't I withdraw from an online course?", "negation"),
        ("zh-hant", "密碼輸錯 5 次會怎樣", "密碼輸錯 3 次會怎樣", "numbers"),
        (
            "en",
            "What happens if I enter the wrong password 5 times?",
            "What if I enter the wrong password 3 times?",
            "numbers",
        ),
        ("en", "How do I download the certificate?", "How do I verify the certificate?", "key_terms"),
        ("zh-hant", "帳號被鎖住怎麼辦", "帳號被鎖住多久", "key_terms"),
    ],
)
async def test_the_guard_keeps_close_but_different_questions_apart(semantic_cache, language, stored, asked, reason):
    await remember(semantic_cache, stored, language=language)

    assert await semantic_cache.lookup(asked, language=language) is None

    stats = semantic_cache.stats()
    assert stats["guard_rejections"] == 1
    assert stats["guard_rejections_by_reason"][reason] == 1
    assert stats["misses"] == 1  # a rejection is a miss
    assert await semantic_cache.lookup(stored, language=language) is not None  # the entry itself is fine


async def test_entries_expire_after_the_ttl_and_the_purge_deletes_them(semantic_cache, clock):
    await remember(semantic_cache, "如何重設密碼？")
    clock.advance(semantic_cache.ttl - 1)
    assert await semantic_cache.lookup("如何重設密碼", language="zh-hant") is not None

    clock.advance(2)
    assert await semantic_cache.lookup("如何重設密碼", language="zh-hant") is None

    assert await asyncio.to_thread(semantic_cache.purge) == 1
    assert await CacheEntry.objects.acount() == 0
    assert semantic_cache.stats()["entries"] == 0


async def test_reindexing_a_cited_document_invalidates_the_entries_citing_it(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？", sources=PASSWORD_SOURCES)
    await remember(semantic_cache, "如何報名課程？", answer="在課程頁點選「立即報名」[1]。", sources=ENROL_SOURCES)

    deleted = await asyncio.to_thread(cache_entries_invalidate_for_documents, ["zh-password-reset"])

    assert deleted == 1
    assert await semantic_cache.lookup("如何重設密碼", language="zh-hant") is None
    assert await semantic_cache.lookup("如何報名課程", language="zh-hant") is not None
    assert [d async for d in CacheEntryDocument.objects.values_list("doc_id", flat=True)] == ["zh-enrolment"]


async def test_languages_do_not_share_entries(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？", language="zh-hant")

    # the same Traditional text (language_normalizer converts Simplified questions), another asker's script
    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hans") is None
    assert await semantic_cache.lookup("如何重設密碼？", language="en") is None
    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hant") is not None


async def test_questions_in_other_languages_are_never_cached(semantic_cache):
    await semantic_cache.store("パスワードを忘れました", language="other", answer="...", sources=PASSWORD_SOURCES)
    assert await asyncio.to_thread(semantic_cache.wait_idle)
    assert await semantic_cache.lookup("パスワードを忘れました", language="other") is None
    assert await CacheEntry.objects.acount() == 0


async def test_a_new_index_version_hides_older_entries_and_the_purge_removes_them(
    semantic_cache, store, corpus_dir, embedder
):
    await remember(semantic_cache, "如何重設密碼？")

    await asyncio.to_thread(build_index, load_markdown_dir(corpus_dir), store, embedder)

    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hant") is None
    assert await asyncio.to_thread(semantic_cache.purge) == 1
    await remember(semantic_cache, "如何重設密碼？")  # answered again on the new index
    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hant") is not None


async def test_a_new_prompt_version_hides_older_entries(make_cache):
    versions = PromptVersions("unified-agent-system@1")
    semantic_cache = make_cache(prompt_version=versions)
    await remember(semantic_cache, "如何重設密碼？")

    versions.version = "unified-agent-system@2"
    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hant") is None

    versions.version = "unified-agent-system@1"  # rolled back
    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hant") is not None


async def test_hits_are_counted_in_memory_and_flushed_in_one_batch(semantic_cache, clock):
    await remember(semantic_cache, "如何重設密碼？")
    for question in ("如何重設密碼", "密碼要怎麼重設", "請問如何重設密碼"):
        clock.advance(1)
        assert await semantic_cache.lookup(question, language="zh-hant") is not None

    row = await CacheEntry.objects.aget()
    assert (row.hits, row.last_hit_at) == (0, None)  # nothing written on the request path
    assert semantic_cache.stats()["pending_hits"] == 3

    assert await asyncio.to_thread(semantic_cache.flush_hits) == 1

    row = await CacheEntry.objects.aget()
    assert row.hits == 3
    assert row.last_hit_at is not None and row.last_hit_at.timestamp() == clock.now
    assert semantic_cache.stats()["pending_hits"] == 0


async def test_closing_the_cache_flushes_pending_hits(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？")
    assert await semantic_cache.lookup("如何重設密碼", language="zh-hant") is not None

    await asyncio.to_thread(semantic_cache.close)

    assert (await CacheEntry.objects.aget()).hits == 1


async def test_the_writer_flushes_hit_counters_every_flush_interval_from_its_start(make_cache):
    semantic_cache = make_cache(flush_interval=0.1)
    await remember(semantic_cache, "如何重設密碼？")  # the first store starts the writer
    assert await semantic_cache.lookup("如何重設密碼", language="zh-hant") is not None

    await until(lambda: semantic_cache.stats()["pending_hits"] == 0)  # neither flush_hits() nor close() called
    await asyncio.to_thread(semantic_cache.close)  # joins the writer, so that flush has finished

    assert (await CacheEntry.objects.aget()).hits == 1
    assert semantic_cache.stats()["errors"] == 0


async def test_a_closed_cache_can_be_closed_again_and_drops_stores_quietly(semantic_cache):
    await asyncio.to_thread(semantic_cache.close)
    await asyncio.to_thread(semantic_cache.close)

    await semantic_cache.store("如何重設密碼？", language="zh-hant", answer=ANSWER, sources=PASSWORD_SOURCES)

    stats = semantic_cache.stats()
    assert (stats["store_dropped"], stats["pending_writes"]) == (0, 0)  # not a full queue: nothing to warn about


async def test_ungrounded_answers_are_not_stored(semantic_cache):
    await semantic_cache.store("如何重設密碼？", language="zh-hant", answer="抱歉，我找不到相關資料。", sources=[])
    assert await asyncio.to_thread(semantic_cache.wait_idle)

    assert await CacheEntry.objects.acount() == 0
    assert semantic_cache.stats()["store_skipped"] == 1


async def test_the_same_question_twice_is_stored_once(semantic_cache):
    await semantic_cache.store("如何重設密碼？", language="zh-hant", answer=ANSWER, sources=PASSWORD_SOURCES)
    await remember(semantic_cache, "如何重設密碼")

    assert await CacheEntry.objects.acount() == 1
    assert semantic_cache.stats()["stores"] == 1


async def test_a_full_write_queue_drops_the_store_without_waiting(make_cache, monkeypatch):
    semantic_cache = make_cache(max_pending_writes=1)
    monkeypatch.setattr(semantic_cache._writer, "start", lambda: None)  # nobody drains the queue

    for question in ("如何重設密碼？", "如何報名課程？"):
        await asyncio.wait_for(
            semantic_cache.store(question, language="zh-hant", answer=ANSWER, sources=PASSWORD_SOURCES), timeout=0.5
        )

    assert semantic_cache.stats()["store_dropped"] == 1
    assert semantic_cache.stats()["pending_writes"] == 1


async def test_entries_survive_a_restart(make_cache, store, embedder, clock):
    first = make_cache()
    await remember(first, "如何重設密碼？")
    await asyncio.to_thread(first.close)

    second = make_cache()  # loads the collection into its mirror again

    assert await second.lookup("密碼要怎麼重設", language="zh-hant") is not None


async def test_the_purge_drops_vectors_whose_rows_were_deleted_elsewhere(semantic_cache, clock):
    await remember(semantic_cache, "如何重設密碼？")
    await CacheEntry.objects.all().adelete()  # e.g. by staff in a process that serves no requests

    clock.advance(300)  # past the grace given to writes in progress
    assert await asyncio.to_thread(semantic_cache.purge) == 1

    assert await semantic_cache.lookup("如何重設密碼？", language="zh-hant") is None


async def test_a_broken_index_raises_so_the_node_answers_without_the_cache(semantic_cache, monkeypatch):
    def fail(*args, **kwargs):
        raise ConnectionError("qdrant went away")

    monkeypatch.setattr(semantic_cache.index, "search", fail)

    with pytest.raises(ConnectionError):
        await semantic_cache.lookup("如何重設密碼？", language="zh-hant")
    assert semantic_cache.stats()["errors"] == 1


async def test_entries_are_tagged_with_the_answer_prompts_production_version():
    from rag.prompting.prompts import CataloguePrompts
    from rag.semcache.cache import registry_prompt_version

    # the catalogue default is version 0; the registry serves the version holding the production label
    assert await registry_prompt_version(CataloguePrompts())() == "unified-agent-system@0"


class StalledNetworkEmbedder:
    """A network embedder whose server has stalled: its async call waits until released; its sync one must never
    be called from a lookup (it would hold a thread for the whole round trip)."""

    def __init__(self, inner, expected_waiters):
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.release = asyncio.Event()
        self.all_waiting = asyncio.Event()
        self.expected_waiters = expected_waiters
        self.waiting = 0
        self.sync_calls = 0

    def embed_documents(self, texts):
        self.sync_calls += 1
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        self.sync_calls += 1
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts):
        return [await self.aembed_query(text) for text in texts]

    async def aembed_query(self, text):
        self.waiting += 1
        if self.waiting == self.expected_waiters:
            self.all_waiting.set()
        await self.release.wait()
        return self.inner.embed_query(text)


async def test_a_stalled_network_embedder_holds_no_thread_while_lookups_wait(semantic_cache):
    await remember(semantic_cache, "如何重設密碼？")
    stalled = StalledNetworkEmbedder(semantic_cache.embedder, expected_waiters=50)
    semantic_cache.embedder = stalled
    lookups = [asyncio.create_task(semantic_cache.lookup("密碼要怎麼重設", language="zh-hant")) for _ in range(50)]
    await asyncio.wait_for(stalled.all_waiting.wait(), timeout=10.0)
    # Fifty lookups wait on the embedding server, yet the default executor still runs work at once.
    assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), timeout=2.0) == "free"
    stalled.release.set()
    entries = await asyncio.gather(*lookups)
    assert all(entry is not None and entry["answer"] == ANSWER for entry in entries)
    assert stalled.sync_calls == 0
