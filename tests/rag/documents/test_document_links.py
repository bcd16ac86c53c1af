"""Every document's link, editable in the admin: http(s) only, written into the index by the job saving queues,
kept by later indexes and syncs, and dropping the cached answers that cited the old link."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from rag.documents.hooks import on_documents_reindexed
from rag.documents.models import Document, IndexJob, Source, SourceKind
from rag.documents.services import index_job_create, source_create, source_sync_request
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.store import VectorStore
from rag.semcache.cache import SemanticCache, build_semantic_cache
from rag.semcache.services import cache_entries_invalidate_for_documents
from tests.local_site import LocalSite, html, sitemap
from tests.rag.documents.conftest import CountingEmbedder
from tests.rag.documents.conftest import run_job as run
from tests.rag.semcache.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)

NEW_LINK = "https://help.example.edu/zh/enrolment"
ENROL = "如何報名課程？"
RESET = "如何重設密碼？"


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    settings.LANGUAGE_CODE = "en"


def links_in_index(store: VectorStore, doc_id: str) -> set[str]:
    live = store.live_collection()
    assert live is not None
    points = store.scroll(live, payload=["doc_id", "url"])
    return {str(p.payload.get("url")) for p in points if p.payload.get("doc_id") == doc_id}


def change_link(staff: Client, document: Document, url: str) -> Any:
    return staff.post(
        f"/admin/rag_documents/document/{document.pk}/change/",
        {
            "url": url,
            "chunks-TOTAL_FORMS": "0",
            "chunks-INITIAL_FORMS": "0",
            "chunks-MIN_NUM_FORMS": "0",
            "chunks-MAX_NUM_FORMS": "1000",
        },
    )


@pytest.fixture
def indexed(store: VectorStore, embedder: CountingEmbedder) -> None:
    run(index_job_create(), store, embedder)


def test_a_link_that_is_not_http_is_a_form_error_naming_the_field(staff: Client, indexed: None) -> None:
    document = Document.objects.get(doc_id="zh-enrolment")
    for bad in ("javascript:alert(1)", "ftp://help.example.edu/x", "https://help.example.edu/a b"):
        response = change_link(staff, document, bad)
        assert response.status_code == 200
        assert "url" in response.context["adminform"].form.errors, bad
    document.refresh_from_db()
    assert (document.url, document.url_override) == ("https://help.example/zh/enrolment", "")
    assert not IndexJob.objects.filter(created_from="admin").exists()


def test_the_change_form_shows_the_link_field_and_saves_as_a_browser_posts_it(staff: Client, indexed: None) -> None:
    document = Document.objects.get(doc_id="zh-enrolment")
    page = staff.get(f"/admin/rag_documents/document/{document.pk}/change/").content.decode()
    assert 'name="url"' in page and "https://help.example/zh/enrolment" in page
    assert "wins over the source" in page and 'name="title"' not in page
    # every hidden field the page holds (the chunks' inline among them) sent back, as a browser would
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page))
    assert "chunks-TOTAL_FORMS" in hidden
    response = staff.post(f"/admin/rag_documents/document/{document.pk}/change/", {**hidden, "url": NEW_LINK})
    assert response.status_code == 302
    document.refresh_from_db()
    assert (document.url, document.url_override) == (NEW_LINK, NEW_LINK)
    assert IndexJob.objects.get(created_from="admin").paths == [document.source]


async def test_saving_a_link_rewrites_the_index_and_drops_only_the_answers_citing_it(
    staff: Client, indexed: None, store: VectorStore, embedder: CountingEmbedder
) -> None:
    cache = await asyncio.to_thread(
        build_semantic_cache,
        store,
        LexicalEmbedder(),
        index_version_ttl=0.0,
        flush_interval=3600.0,
        purge_interval=3600.0,
    )
    unsubscribe = on_documents_reindexed(partial(cache_entries_invalidate_for_documents, cache=cache))
    try:
        await _link_saved_and_applied(staff, store, embedder, cache)
    finally:
        unsubscribe()
        cache.close()


async def _link_saved_and_applied(
    staff: Client, store: VectorStore, embedder: CountingEmbedder, cache: SemanticCache
) -> None:
    enrol = [{"ref": 1, "doc_id": "zh-enrolment", "title": "如何報名課程", "url": "https://help.example/zh/enrolment"}]
    await remember(cache, ENROL, sources=enrol)
    await remember(cache, RESET)  # cites zh-password-reset
    done = await asyncio.to_thread(_save_and_run, staff, store, embedder)

    assert (done.updated, done.added, done.deleted) == (1, 0, 0)
    assert await asyncio.to_thread(links_in_index, store, "zh-enrolment") == {NEW_LINK}
    assert await asyncio.to_thread(links_in_index, store, "zh-password-reset") == {
        "https://help.example/zh/password-reset"
    }
    document = await Document.objects.aget(doc_id="zh-enrolment")
    assert (document.url, document.url_override) == (NEW_LINK, NEW_LINK)
    assert await cache.lookup(ENROL, language="zh-hant") is None
    assert await cache.lookup(RESET, language="zh-hant") is not None


def _save_and_run(staff: Client, store: VectorStore, embedder: CountingEmbedder) -> IndexJob:
    response = change_link(staff, Document.objects.get(doc_id="zh-enrolment"), NEW_LINK)
    assert response.status_code == 302
    embedder.reset()
    return run(IndexJob.objects.get(created_from="admin"), store, embedder)


def test_a_later_reindex_keeps_the_staff_link_and_clearing_it_restores_the_source_link(
    staff: Client, indexed: None, store: VectorStore, embedder: CountingEmbedder
) -> None:
    document = Document.objects.get(doc_id="zh-enrolment")
    change_link(staff, document, NEW_LINK)
    run(IndexJob.objects.get(created_from="admin"), store, embedder)

    embedder.reset()
    again = run(index_job_create(), store, embedder)
    assert again.updated == 0 and embedder.texts == []
    assert links_in_index(store, "zh-enrolment") == {NEW_LINK}

    change_link(staff, document, "")
    cleared = run(IndexJob.objects.filter(created_from="admin").latest("created_at"), store, embedder)
    assert cleared.updated == 1
    assert links_in_index(store, "zh-enrolment") == {"https://help.example/zh/enrolment"}
    document.refresh_from_db()
    assert (document.url, document.url_override) == ("https://help.example/zh/enrolment", "")


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as served:
        served.pages["/deadline.html"] = html("Deadlines", "<p>Applications close on 15 March.</p>")
        served.pages["/fees.html"] = html("Fees", "<p>Visitors pay NT$ 2,000 a credit.</p>")
        served.pages["/sitemap.xml"] = sitemap([served.url("/deadline.html"), served.url("/fees.html")])
        yield served


def test_a_staff_link_on_a_website_page_wins_over_its_url_on_every_sync(
    staff: Client, store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    run(source_sync_request(source=source), store, embedder)
    page = Document.objects.get(doc_id="web/help/fees.html")

    change_link(staff, page, "https://www.example.edu/fees")
    job = IndexJob.objects.get(created_from="admin")
    assert job.source == source  # a website page is re-read from its site
    done = run(job, store, embedder)

    assert (done.updated, done.unchanged) == (1, 1)
    assert site.not_modified["/fees.html"] == 0  # asked for in full: a 304 would have kept the old link
    assert links_in_index(store, "web/help/fees.html") == {"https://www.example.edu/fees"}
    later = run(source_sync_request(source=source), store, embedder)
    assert later.updated == 0 and site.not_modified["/fees.html"] == 1
    assert links_in_index(store, "web/help/fees.html") == {"https://www.example.edu/fees"}
    assert links_in_index(store, "web/help/deadline.html") == {site.url("/deadline.html")}


def test_a_folder_source_document_keeps_its_staff_link_over_the_base_url(
    staff: Client, store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    folder = corpus / "guides"
    folder.mkdir()
    (folder / "fees.md").write_text("---\ntitle: Fees\nlanguage: en\n---\n\nVisitors pay NT$ 2,000.\n")
    source = Source.objects.create(
        name="guides", kind=SourceKind.FOLDER, folder=str(folder), base_url="https://b.example/"
    )
    run(source_sync_request(source=source), store, embedder)
    document = Document.objects.get(source__endswith="guides/fees.md")
    assert document.url == "https://b.example/fees.md"

    change_link(staff, document, "https://help.example.edu/fees")
    job = IndexJob.objects.get(created_from="admin")
    assert job.source == source
    run(job, store, embedder)
    run(source_sync_request(source=source), store, embedder)

    assert links_in_index(store, document.doc_id) == {"https://help.example.edu/fees"}
