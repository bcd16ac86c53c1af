"""Cached answers across index jobs: an incremental reindex keeps the index version, so only answers citing a
re-indexed or deleted document go; a full reindex starts a new version and every answer goes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from rag.documents.hooks import on_documents_reindexed
from rag.documents.indexing import index_job_execute
from rag.documents.models import IndexJob, JobStatus
from rag.documents.services import index_job_create, job_claim
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.store import VectorStore
from rag.semcache.cache import SemanticCache
from rag.semcache.models import CacheEntry
from rag.semcache.services import cache_entries_invalidate_for_documents
from tests.rag.retrieval.conftest import CORPUS
from tests.rag.semcache.conftest import ENROL_SOURCES, PASSWORD_SOURCES, remember

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "如何重設密碼？"
ENROL = "如何報名課程？"
ENROL_ANSWER = "在課程頁點選「立即報名」[1]。"


def run_job(store: VectorStore, embedder: LexicalEmbedder, corpus: Path, *, full: bool = False) -> IndexJob:
    job = index_job_create(paths=[str(corpus)], full=full)
    assert job_claim(job=job, runner="test:1", store_owner=True)
    done = index_job_execute(job=job, store=store, embedder=embedder)
    assert done.status == JobStatus.SUCCEEDED, done.error
    return done


async def reindex(store: VectorStore, embedder: LexicalEmbedder, corpus: Path, *, full: bool = False) -> IndexJob:
    return await asyncio.to_thread(run_job, store, embedder, corpus, full=full)


def change_password_article(corpus: Path) -> None:
    (corpus / "zh-password-reset.md").write_text(CORPUS["zh-password-reset.md"] + "\n重設連結現在有效 60 分鐘。\n")


@pytest.fixture
def hooked(semantic_cache: SemanticCache) -> Iterator[SemanticCache]:
    """The cache with the re-index hook registered as rag.wiring does for the serving process."""
    unsubscribe = on_documents_reindexed(partial(cache_entries_invalidate_for_documents, cache=semantic_cache))
    yield semantic_cache
    unsubscribe()


async def fill(cache: SemanticCache) -> None:
    await remember(cache, PASSWORD, sources=PASSWORD_SOURCES)
    await remember(cache, ENROL, answer=ENROL_ANSWER, sources=ENROL_SOURCES)
    assert await cache.lookup(PASSWORD, language="zh-hant") is not None
    assert await cache.lookup(ENROL, language="zh-hant") is not None


async def questions() -> list[str]:
    return sorted([q async for q in CacheEntry.objects.values_list("question", flat=True)])


async def test_reindexing_one_changed_document_drops_only_the_answers_citing_it(
    hooked: SemanticCache, store: VectorStore, embedder: LexicalEmbedder, corpus_dir: Path
) -> None:
    await fill(hooked)
    before = await asyncio.to_thread(store.index_version)
    change_password_article(corpus_dir)

    job = await reindex(store, embedder, corpus_dir)

    assert (job.updated, job.unchanged) == (1, 4)
    after = await asyncio.to_thread(store.index_version)
    assert before is not None and after is not None
    assert after.version == before.version and after.generation == before.generation + 1
    assert await hooked.lookup(PASSWORD, language="zh-hant") is None
    assert await hooked.lookup(ENROL, language="zh-hant") == {"answer": ENROL_ANSWER, "sources": ENROL_SOURCES}
    assert await questions() == [ENROL]  # the hook deleted the row with its vector
    assert hooked.stats()["entries"] == 1


async def test_a_reindex_nobody_hooked_never_serves_an_outdated_answer_and_the_cache_deletes_it(
    semantic_cache: SemanticCache, store: VectorStore, embedder: LexicalEmbedder, corpus_dir: Path
) -> None:
    # e.g. `manage.py reindex` run while the server was stopped: no cache listened in the job's process
    await fill(semantic_cache)
    change_password_article(corpus_dir)

    await reindex(store, embedder, corpus_dir)

    assert await questions() == [ENROL, PASSWORD]  # nothing deleted yet
    assert await semantic_cache.lookup(PASSWORD, language="zh-hant") is None
    assert await semantic_cache.lookup(ENROL, language="zh-hant") is not None
    # the writer's next wake-up sees the index moved and purges the outdated entry (row and vector)
    await remember(semantic_cache, "如何下載證書？", sources=ENROL_SOURCES)
    assert await questions() == ["如何下載證書？", ENROL]
    assert semantic_cache.stats()["entries"] == 2
    assert await asyncio.to_thread(semantic_cache.purge) == 0


async def test_a_full_reindex_drops_every_answer(
    hooked: SemanticCache, store: VectorStore, embedder: LexicalEmbedder, corpus_dir: Path
) -> None:
    await fill(hooked)
    before = await asyncio.to_thread(store.index_version)

    job = await reindex(store, embedder, corpus_dir, full=True)

    after = await asyncio.to_thread(store.index_version)
    assert job.updated == 0  # nothing changed, and still every answer goes
    assert before is not None and after is not None and after.version != before.version
    assert await hooked.lookup(PASSWORD, language="zh-hant") is None
    assert await hooked.lookup(ENROL, language="zh-hant") is None
    assert await asyncio.to_thread(hooked.purge) == 2
    assert await questions() == [] and hooked.stats()["entries"] == 0


async def test_an_unchanged_reindex_keeps_every_answer(
    hooked: SemanticCache, store: VectorStore, embedder: LexicalEmbedder, corpus_dir: Path
) -> None:
    await fill(hooked)

    await reindex(store, embedder, corpus_dir)

    assert await hooked.lookup(PASSWORD, language="zh-hant") is not None
    assert await hooked.lookup(ENROL, language="zh-hant") is not None
    assert await asyncio.to_thread(hooked.purge) == 0
    assert await questions() == [ENROL, PASSWORD]


async def test_an_answer_retrieved_before_a_reindex_is_stored_only_if_its_documents_did_not_change(
    hooked: SemanticCache, store: VectorStore, embedder: LexicalEmbedder, corpus_dir: Path
) -> None:
    # both asked (and missed) on the old index; their answers reach the cache after the reindex and its hook
    assert await hooked.lookup(PASSWORD, language="zh-hant") is None
    change_password_article(corpus_dir)
    await reindex(store, embedder, corpus_dir)

    await remember(hooked, PASSWORD, sources=PASSWORD_SOURCES)
    await remember(hooked, ENROL, answer=ENROL_ANSWER, sources=ENROL_SOURCES)

    assert await questions() == [ENROL]
    assert hooked.stats()["store_skipped"] == 1
    assert await hooked.lookup(PASSWORD, language="zh-hant") is None
    await remember(hooked, PASSWORD, sources=PASSWORD_SOURCES)  # answered again on the new index
    assert await hooked.lookup(PASSWORD, language="zh-hant") is not None
