"""A website page edited between two syncs drops only the cached answers that cited it (the re-index hook the
serving process registers; other workers follow the cache's revision as for any reindex)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial

import pytest

from rag.documents.hooks import on_documents_reindexed
from rag.documents.indexing import index_job_execute
from rag.documents.models import IndexJob, JobStatus, Source, SourceKind
from rag.documents.services import job_claim, source_create, source_sync_request
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.store import VectorStore
from rag.semcache.cache import SemanticCache
from rag.semcache.services import cache_entries_invalidate_for_documents
from tests.local_site import LocalSite, html, sitemap
from tests.rag.semcache.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = "When do applications close?"
FEES = "How much do visitors pay?"


def sync(store: VectorStore, embedder: LexicalEmbedder, source: Source) -> IndexJob:
    job = source_sync_request(source=source)
    assert job_claim(job=job, runner="test:1", store_owner=True)
    done = index_job_execute(job=job, store=store, embedder=embedder)
    assert done.status == JobStatus.SUCCEEDED, done.error
    return done


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as served:
        served.pages["/deadline.html"] = html("Deadlines", "<p>Applications close on 15 March.</p>")
        served.pages["/fees.html"] = html("Fees", "<p>Visitors pay NT$ 2,000 a credit.</p>")
        served.pages["/sitemap.xml"] = sitemap([served.url("/deadline.html"), served.url("/fees.html")])
        yield served


def cited(site: LocalSite, path: str) -> list[dict[str, object]]:
    return [{"ref": 1, "doc_id": f"web/help{path}", "title": path, "url": site.url(path)}]


async def test_an_edited_page_drops_only_the_answers_citing_it(
    semantic_cache: SemanticCache, store: VectorStore, embedder: LexicalEmbedder, site: LocalSite
) -> None:
    unsubscribe = on_documents_reindexed(partial(cache_entries_invalidate_for_documents, cache=semantic_cache))
    try:
        source = await asyncio.to_thread(
            source_create, name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50
        )
        await asyncio.to_thread(sync, store, embedder, source)
        await remember(semantic_cache, DEADLINE, language="en", sources=cited(site, "/deadline.html"))
        await remember(semantic_cache, FEES, language="en", sources=cited(site, "/fees.html"))
        site.pages["/deadline.html"] = html("Deadlines", "<p>Applications close on 22 March.</p>")

        job = await asyncio.to_thread(sync, store, embedder, source)

        assert (job.updated, job.unchanged) == (1, 1)
        assert await semantic_cache.lookup(DEADLINE, language="en") is None
        assert await semantic_cache.lookup(FEES, language="en") is not None
    finally:
        unsubscribe()
