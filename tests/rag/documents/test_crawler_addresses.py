"""The crawler checks addresses where it connects: a name is resolved once, every address checked, and the
connection made to the checked address, so a DNS answer that changes after a check cannot reach loopback."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from rag.documents.crawler import CheckedBackend, CrawlConfig, Crawler, CrawlRefused, PageResult, checked_transport
from tests.local_site import LocalSite, html

PUBLIC = "93.184.216.34"  # never connected to: every test answers loopback before a connection is made


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as served:
        served.pages["/"] = html("Help centre", '<a href="/fees.html">Fees</a>')
        served.pages["/fees.html"] = html("Fees", "<p>Visitors pay NT$ 2,000.</p>")
        yield served


async def test_a_name_resolving_to_loopback_is_refused_at_connect_time(site: LocalSite) -> None:
    """`localhost` through the transport alone (no check beforehand): the connection itself is refused."""
    async with httpx.AsyncClient(transport=checked_transport(internal=False)) as client:
        with pytest.raises(CrawlRefused, match="loopback"):
            await client.get(f"http://localhost:{site.port}/")
    assert sum(site.hits.values()) == 0


async def test_an_internal_source_still_reaches_loopback_by_name(site: LocalSite) -> None:
    async with httpx.AsyncClient(transport=checked_transport(internal=True)) as client:
        response = await client.get(f"http://localhost:{site.port}/fees.html")
    assert response.status_code == 200 and b"NT$ 2,000" in response.content
    assert site.hits["/fees.html"] == 1


async def test_the_connection_goes_to_the_address_that_was_checked(site: LocalSite) -> None:
    """A name no system resolver knows, answered by the crawl's resolver: the page comes from that address, with
    the URL's host name kept for the request."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    results: list[PageResult] = []
    config = CrawlConfig(start_url=f"http://help.invalid:{site.port}/", internal=True, rate=100)
    await Crawler(config, on_result=results.append, resolver=resolver).run()

    assert {r.url: r.outcome for r in results} == {
        f"http://help.invalid:{site.port}/": "fetched",
        f"http://help.invalid:{site.port}/fees.html": "fetched",
    }
    assert set(asked) == {"help.invalid"} and site.hits["/fees.html"] == 1


async def test_a_dns_answer_that_turns_to_loopback_after_the_check_reaches_nothing(site: LocalSite) -> None:
    """DNS rebinding: the first answer (the crawl's up-front check) is public, every later one loopback."""
    answers: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        answers.append(PUBLIC if not answers else "127.0.0.1")
        return [answers[-1]]

    results: list[PageResult] = []
    config = CrawlConfig(start_url=f"http://localhost:{site.port}/", rate=100)
    summary = await Crawler(config, on_result=results.append, resolver=rebinding).run()

    assert answers[0] == PUBLIC and "127.0.0.1" in answers[1:]
    assert "nothing crawled" in summary.robots  # robots.txt could not be read: the connection was refused
    assert sum(site.hits.values()) == 0


async def test_a_non_internal_crawl_of_localhost_is_refused_before_anything_is_asked(site: LocalSite) -> None:
    config = CrawlConfig(start_url=f"http://localhost:{site.port}/", rate=100)
    with pytest.raises(CrawlRefused, match="loopback"):
        await Crawler(config).run()
    assert sum(site.hits.values()) == 0


async def test_every_address_of_a_name_is_checked(site: LocalSite) -> None:
    async def two(host: str, port: int) -> list[str]:
        return [PUBLIC, "127.0.0.1"]

    backend = CheckedBackend(internal=False, resolver=two)
    with pytest.raises(CrawlRefused, match=r"127\.0\.0\.1"):
        await backend.connect_tcp("help.invalid", site.port)
    assert sum(site.hits.values()) == 0
