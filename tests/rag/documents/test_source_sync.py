"""Website sources synced as index jobs against a real HTTP server on loopback, edited between syncs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from rag.documents.indexing import index_job_execute
from rag.documents.models import Chunk, Document, DocumentStatus, IndexJob, JobStatus, Source, SourceKind, SourcePage
from rag.documents.services import (
    index_job_create,
    job_claim,
    source_create,
    source_sync_request,
    sources_due_enqueue,
)
from rag.retrieval.store import VectorStore
from tests.local_site import LocalSite, html, sitemap, sitemap_index
from tests.rag.documents.conftest import CountingEmbedder, doc_ids_of
from tests.rag.retrieval.test_office_loaders import write_docx, write_xlsx

pytestmark = pytest.mark.django_db

FEES = (
    "<p>Fees for auditing courses.</p><table><tr><th>Who</th><th>Fee</th></tr>"
    "<tr><td>Students</td><td>free</td></tr><tr><td>Visitors</td><td>NT$ 2,000</td></tr></table>"
)


def site_pages(site: LocalSite) -> None:
    site.pages.update(
        {
            "/": html("Help centre", '<a href="/deadline.html">Deadlines</a> <a href="/fees.html">Fees</a>'),
            "/deadline.html": html("Deadlines", "<p>Applications close on 15 March.</p>"),
            "/fees.html": html("Fees", FEES),
            "/zh/fees.html": html("旁聽費用", "<p>校外人士旁聽每學分新台幣二千元。</p>", lang="zh-Hant"),
        }
    )
    urls = [site.url(p) for p in ("/", "/deadline.html", "/fees.html", "/zh/fees.html")]
    site.pages["/sitemap.xml"] = sitemap(urls)


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as served:
        site_pages(served)
        yield served


def sync(store: VectorStore, embedder: Any, source: Source, **options: Any) -> IndexJob:
    job = source_sync_request(source=source, **options)
    assert job_claim(job=job, runner="test:1", store_owner=True)
    return index_job_execute(job=job, store=store, embedder=embedder)


def web_ids(store: VectorStore) -> set[str]:
    return {doc_id for doc_id in doc_ids_of(store) if doc_id.startswith("web/")}


def test_a_sitemap_source_indexes_every_page_with_its_url(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    job = sync(store, embedder, source)
    assert job.status == JobStatus.SUCCEEDED, job.error + job.log
    assert web_ids(store) == {"web/help/index", "web/help/deadline.html", "web/help/fees.html", "web/help/zh/fees.html"}
    fees = Document.objects.get(doc_id="web/help/fees.html")
    assert fees.url == site.url("/fees.html") and fees.title == "Fees" and fees.source_format == "html"
    assert Document.objects.get(doc_id="web/help/zh/fees.html").language == "zh-hant"
    assert job.report["source"] == "help" and job.report["outcomes"] == {"fetched": 4}
    assert SourcePage.objects.filter(source=source).count() == 4
    assert any("HelpCentreBot" in agent for agent in site.user_agents)


def test_an_edited_page_is_re_read_and_the_others_cost_a_304(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    sync(store, embedder, source)
    site.pages["/deadline.html"] = html("Deadlines", "<p>Applications close on 22 March.</p>")
    embedder.reset()

    job = sync(store, embedder, source)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.added, job.updated, job.unchanged, job.deleted) == (0, 1, 3, 0)
    assert site.not_modified["/fees.html"] == site.not_modified["/"] == site.not_modified["/zh/fees.html"] == 1
    assert site.not_modified["/deadline.html"] == 0
    assert any("22 March" in text for text in embedder.texts)
    assert not any("Fees" in text for text in embedder.texts)


def test_a_page_removed_from_the_site_leaves_the_index_after_two_syncs(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    sync(store, embedder, source)
    del site.pages["/deadline.html"]

    first = sync(store, embedder, source)
    assert first.status == JobStatus.SUCCEEDED, first.error
    assert "web/help/deadline.html" in web_ids(store)
    assert Document.objects.get(doc_id="web/help/deadline.html").status == DocumentStatus.STALE

    second = sync(store, embedder, source)
    assert second.status == JobStatus.SUCCEEDED, second.error
    assert second.deleted == 1 and "web/help/deadline.html" not in web_ids(store)
    assert Document.objects.get(doc_id="web/help/deadline.html").status == DocumentStatus.DELETED


def test_a_start_url_source_follows_same_site_links_only_and_honours_robots(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    site.pages["/"] = html(
        "Help centre",
        '<a href="/deadline.html">a</a> <a href="/fees.html">b</a> <a href="/private/x.html">c</a>'
        ' <a href="http://example.com/elsewhere.html">off site</a>',
    )
    site.pages["/private/x.html"] = html("Private", "<p>staff only</p>")
    site.pages["/robots.txt"] = Page_text("User-agent: HelpCentreBot\nDisallow: /private/\n")

    source = source_create(name="site", kind=SourceKind.WEBSITE, url=site.url("/"), internal=True, rate=50)
    job = sync(store, embedder, source)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert web_ids(store) == {"web/site/index", "web/site/deadline.html", "web/site/fees.html"}
    assert site.hits["/private/x.html"] == 0
    excluded = [p for p in job.report["pages"] if p["outcome"] == "excluded"]
    private = {"url": site.url("/private/x.html"), "outcome": "excluded", "detail": "disallowed by robots.txt"}
    assert excluded == [private]


def test_a_redirect_off_the_site_is_refused_and_reported(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    site.redirects["/fees.html"] = "http://localhost:9/fees.html"
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    job = sync(store, embedder, source)
    assert job.status == JobStatus.SUCCEEDED, job.error
    refused = {p["url"]: p for p in job.report["pages"]}[site.url("/fees.html")]
    assert refused["outcome"] == "refused" and "not on the source's site" in refused["detail"]


def test_loopback_is_refused_unless_the_source_is_internal(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"))
    job = sync(store, embedder, source)
    assert job.status == JobStatus.FAILED
    assert "loopback" in job.error and sum(site.hits.values()) == 0


def test_a_sitemap_index_is_followed_and_redirects_land_on_the_final_url(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    site.pages["/sitemap-a.xml"] = sitemap([site.url("/old-fees.html")])
    site.pages["/sitemap-b.xml"] = sitemap([site.url("/deadline.html")])
    site.pages["/sitemap.xml"] = sitemap_index([site.url("/sitemap-a.xml"), site.url("/sitemap-b.xml")])
    site.redirects["/old-fees.html"] = "/fees.html"
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    job = sync(store, embedder, source)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert web_ids(store) == {"web/help/old-fees.html", "web/help/deadline.html"}
    assert Document.objects.get(doc_id="web/help/old-fees.html").url == site.url("/fees.html")


def test_one_sync_at_a_time_per_source_and_schedules_come_from_the_row(site: LocalSite) -> None:
    source = source_create(
        name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, every=timedelta(hours=6)
    )
    assert source.next_sync_at is not None
    first = sources_due_enqueue()
    assert [job.source_id for job in first] == [source.pk]
    # asking again while it is pending returns the same job; the schedule moved on six hours
    assert source_sync_request(source=source).pk == first[0].pk
    assert sources_due_enqueue() == []
    source.refresh_from_db()
    assert source.next_sync_at is not None and source.next_sync_at > timezone.now() + timedelta(hours=5)
    later = sources_due_enqueue(now=timezone.now() + timedelta(hours=7))
    assert [job.pk for job in later] == [first[0].pk]  # still one job for the source
    assert IndexJob.objects.filter(source=source).count() == 1


def test_removing_a_source_drops_its_documents_and_the_source(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    corpus_job = index_job_create()
    assert job_claim(job=corpus_job, runner="test:1", store_owner=True)
    index_job_execute(job=corpus_job, store=store, embedder=embedder)
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    sync(store, embedder, source)
    job = sync(store, embedder, source, remove=True)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.deleted == 4 and web_ids(store) == set() and len(doc_ids_of(store)) == 5
    assert not Source.objects.filter(name="help").exists()


def Page_text(text: str) -> Any:
    from tests.local_site import Page

    return Page(text.encode(), "text/plain")


def test_a_folder_source_reads_office_files_and_links_them_by_base_url(
    store: VectorStore, embedder: CountingEmbedder, tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    (folder / "zh").mkdir(parents=True)
    write_docx(folder / "zh" / "audit.docx")
    write_xlsx(folder / "fees.xlsx")
    source = source_create(
        name="office", kind=SourceKind.FOLDER, folder=str(folder), base_url="https://help.example.edu/"
    )
    job = sync(store, embedder, source)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.added == 2
    audit = Document.objects.get(source__endswith="audit.docx")
    assert audit.url == "https://help.example.edu/zh/audit.docx" and audit.source_format == "docx"
    fees = Document.objects.get(source__endswith="fees.xlsx")
    assert fees.url == "https://help.example.edu/fees.xlsx"
    rows = Chunk.objects.filter(document=fees).values_list("text_preview", flat=True)
    assert any("| Who | Fee |\n| --- | --- |\n| Students | free |" in text for text in rows)


def test_a_robots_txt_that_answers_503_means_nothing_is_crawled(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    site.status["/robots.txt"] = 503
    source = source_create(name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml"), internal=True, rate=50)
    job = sync(store, embedder, source)
    assert job.status == JobStatus.FAILED and "no page that could be indexed" in job.error
    assert "disallowed by robots.txt" in job.log and site.hits["/fees.html"] == 0
