"""Gzipped sitemaps from the local site: `sitemap.xml.gz`, gzip bodies whatever their name or headers, inside a
sitemap index, and never decompressed past the limit."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest

from rag.documents.crawler import CrawlConfig, Crawler, CrawlRefused, PageResult, gunzipped
from rag.documents.indexing import index_job_execute
from rag.documents.models import Document, JobStatus, SourceKind
from rag.documents.services import job_claim, source_create, source_sync_request
from rag.retrieval.store import VectorStore
from tests.local_site import LocalSite, Page, html, sitemap, sitemap_index
from tests.rag.documents.conftest import CountingEmbedder


def gzipped(page: Page, content_type: str = "application/gzip") -> Page:
    return Page(gzip.compress(page.body), content_type)


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as served:
        served.pages["/deadline.html"] = html("Deadlines", "<p>Applications close on 15 March.</p>")
        served.pages["/fees.html"] = html("Fees", "<p>Visitors pay NT$ 2,000 a credit.</p>")
        pages = sitemap([served.url("/deadline.html"), served.url("/fees.html")])
        served.pages["/sitemap.xml.gz"] = gzipped(pages)
        # gzip sent as plain XML, with no Content-Encoding: read by its bytes, not its headers
        served.pages["/sitemap-plain-name.xml"] = gzipped(pages, "application/xml")
        served.pages["/index.xml"] = sitemap_index([served.url("/sitemap.xml.gz")])
        yield served


async def crawl(site: LocalSite, path: str, *, max_sitemap_bytes: int = 1_000_000) -> list[PageResult]:
    results: list[PageResult] = []
    config = CrawlConfig(
        start_url=site.url(path), sitemap=True, internal=True, rate=100, max_sitemap_bytes=max_sitemap_bytes
    )
    await Crawler(config, on_result=results.append).run()
    return results


@pytest.mark.parametrize("path", ["/sitemap.xml.gz", "/sitemap-plain-name.xml", "/index.xml"])
async def test_a_gzipped_sitemap_gives_its_pages(site: LocalSite, path: str) -> None:
    results = await crawl(site, path)
    assert {r.url: r.outcome for r in results} == {
        site.url("/deadline.html"): "fetched",
        site.url("/fees.html"): "fetched",
    }


async def test_a_sitemap_past_the_limit_once_decompressed_is_refused(site: LocalSite) -> None:
    # 64 KB of sitemap in about 200 compressed bytes: the limit is on what it becomes
    padding = "<!--" + " " * 64_000 + "-->"
    big = sitemap([site.url("/fees.html")]).body.replace(b"<urlset", padding.encode() + b"<urlset", 1)
    site.pages["/big.xml.gz"] = Page(gzip.compress(big), "application/gzip")
    assert len(site.pages["/big.xml.gz"].body) < 1000

    with pytest.raises(CrawlRefused, match="once decompressed"):
        await crawl(site, "/big.xml.gz", max_sitemap_bytes=32_000)
    assert site.hits["/fees.html"] == 0
    assert len(await crawl(site, "/big.xml.gz", max_sitemap_bytes=128_000)) == 1


def test_gunzipped_leaves_plain_bodies_and_refuses_broken_ones() -> None:
    assert gunzipped(b"<urlset/>", limit=10) == b"<urlset/>"
    assert gunzipped(gzip.compress(b"<urlset/>"), limit=10) == b"<urlset/>"
    with pytest.raises(ValueError, match="broken gzip"):
        gunzipped(gzip.compress(b"<urlset/>" * 100)[:30], limit=10_000)


@pytest.mark.django_db
def test_a_source_added_by_its_gzipped_sitemap_is_indexed_with_each_page_url(
    store: VectorStore, embedder: CountingEmbedder, site: LocalSite
) -> None:
    source = source_create(
        name="help", kind=SourceKind.SITEMAP, url=site.url("/sitemap.xml.gz"), internal=True, rate=50
    )
    job = source_sync_request(source=source)
    assert job_claim(job=job, runner="test:1", store_owner=True)
    done = index_job_execute(job=job, store=store, embedder=embedder)

    assert done.status == JobStatus.SUCCEEDED, done.error + done.log
    assert done.added == 2
    assert Document.objects.get(doc_id="web/help/fees.html").url == site.url("/fees.html")
