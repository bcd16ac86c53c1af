"""A polite, incremental crawler for one website source: no ORM, no settings; what it needs is passed in.

What it promises:

- It never leaves the site: every URL it asks for, redirects and canonical links included, has the start URL's
  scheme, host and port. A host that resolves to a private, loopback, link-local or otherwise special address is
  refused unless the source is marked internal, so a crawl is never a way to reach the servers beside it. The
  check is made where the connection is made (`CheckedBackend`): the name is resolved once, every address checked,
  and the connection opened to the checked address (TLS and the Host header still name the host), so a DNS answer
  that changes between a check and the connection cannot lead to a private address.
- robots.txt is read once per crawl and honoured for the named user agent (its Crawl-delay too); `<meta
  name="robots" content="noindex">` keeps a page out and `nofollow` stops link discovery from it.
- Requests are paced (`rate` per second across the crawl) and bounded (`concurrency` at once, `max_bytes` and
  `timeout` per page, `max_redirects` hops).
- Pages it saw before are asked for conditionally (If-None-Match / If-Modified-Since); a 304 costs no body.
- Each URL ends as one `PageResult` with an outcome, handed to `on_result` as soon as it is known, so the caller
  can turn the body into a document and drop it (memory stays flat whatever the site's size).

Sources of URLs: a sitemap (sitemap indexes followed; gzipped ones, `sitemap.xml.gz` or any gzip body, are
decompressed up to `max_sitemap_bytes`) or a start page whose same-site links
are followed breadth first; plus every page known from earlier syncs, so a page that disappeared is asked for
again and its 404/410 seen.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import logging
import socket
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Literal
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import httpcore
import httpx

logger = logging.getLogger(__name__)

Outcome = Literal["fetched", "not_modified", "gone", "error", "refused", "excluded", "duplicate"]
DEFAULT_USER_AGENT = "HelpCentreBot/1.0 (+self-hosted help-centre assistant)"
_SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
_MAX_SITEMAPS = 50
_MAX_CRAWL_DELAY = 10.0
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_GZIP_MAGIC = b"\x1f\x8b"


class CrawlRefused(ValueError):
    """The source's URL itself cannot be crawled (not http(s), or an address the source may not reach)."""


@dataclass(frozen=True, slots=True)
class CrawlConfig:
    start_url: str
    sitemap: bool = False  # start_url is a sitemap (or a sitemap index)
    include: tuple[str, ...] = ()  # globs on the URL path (with its query); empty: every path
    exclude: tuple[str, ...] = ()
    max_pages: int = 1000
    internal: bool = False
    rate: float = 2.0
    concurrency: int = 2
    user_agent: str = DEFAULT_USER_AGENT
    max_bytes: int = 5 * 1024 * 1024
    timeout: float = 20.0
    max_redirects: int = 5
    max_sitemap_bytes: int = 50 * 1024 * 1024  # a sitemap, once decompressed (the sitemaps protocol's own limit)
    conditional: bool = True  # False: ask for every page in full (a full re-sync)


@dataclass(frozen=True, slots=True)
class KnownPage:
    url: str
    etag: str = ""
    last_modified: str = ""


@dataclass(slots=True)
class PageResult:
    url: str  # the URL as discovered (the key the caller keeps state by)
    outcome: Outcome
    final_url: str = ""  # after redirects and the canonical link
    status: int | None = None
    detail: str = ""
    etag: str = ""
    last_modified: str = ""
    content_type: str = ""
    body: bytes = b""


@dataclass(slots=True)
class CrawlSummary:
    asked: int = 0
    robots: str = ""  # how robots.txt was read
    discovered: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


ResultCallback = Callable[[PageResult], Awaitable[None] | None]


# --- addresses and URLs ----------------------------------------------------------------------------------------


def address_refused(address: str) -> bool:
    """Whether an IP address is one a crawl of a public site must never reach."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return bool(
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (the system's resolver), in its order, each once; OSError when none."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def addresses_refusal(host: str, addresses: Iterable[str]) -> str:
    """ "" when every address is public, else why `host` may not be reached."""
    for address in addresses:
        if address_refused(address):
            return f"{host} resolves to {address}, a private, loopback or link-local address (mark the source internal)"
    return ""


async def host_check(host: str, port: int, *, internal: bool, resolver: Resolver = resolve) -> str:
    """ "" when `host` may be crawled, else why not. Every address the name resolves to must be public unless
    `internal`. A first look, for a clear error before anything is asked; the guarantee is `CheckedBackend`."""
    if internal:
        return ""
    try:
        addresses = await resolver(host, port)
    except OSError as exc:
        return f"cannot resolve {host} ({exc})"
    return addresses_refusal(host, addresses)


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend that connects only to addresses it has just checked: it resolves the name
    itself, refuses the connection when any address is private, loopback or link-local (unless `internal`), and
    connects to the checked address. httpcore still starts TLS with the host name (SNI, certificate check) and
    httpx sends the URL's Host header, so only the address lookup is pinned."""

    def __init__(self, *, internal: bool, resolver: Resolver = resolve) -> None:
        self.internal = internal
        self.resolver = resolver
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self.resolver(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host} ({exc})") from exc
        reason = "" if self.internal else addresses_refusal(host, addresses)
        if reason:
            raise CrawlRefused(reason)
        failure: Exception = httpcore.ConnectError(f"{host} resolves to no address")
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise CrawlRefused("a crawl connects over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def checked_transport(
    *, internal: bool, concurrency: int = 2, resolver: Resolver = resolve
) -> httpx.AsyncBaseTransport:
    """An httpx transport whose every connection goes through `CheckedBackend` (no proxies, no environment)."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx takes no network backend, so the pool it built is replaced by one that uses ours, as configured
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=max(1, concurrency),
        max_keepalive_connections=max(1, concurrency),
        keepalive_expiry=5.0,
        network_backend=CheckedBackend(internal=internal, resolver=resolver),
    )
    return transport


def site_of(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def normalise(url: str, base: str = "") -> str:
    """An absolute URL without fragment, with a lower-case scheme and host and a path ("/" at least)."""
    joined = urljoin(base, url.strip()) if base else url.strip()
    joined, _ = urldefrag(joined)
    parts = urlsplit(joined)
    netloc = parts.netloc.lower()
    scheme = parts.scheme.lower()
    if (scheme == "http" and netloc.endswith(":80")) or (scheme == "https" and netloc.endswith(":443")):
        netloc = netloc.rsplit(":", 1)[0]
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def _glob_target(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def url_wanted(url: str, *, include: Iterable[str], exclude: Iterable[str]) -> bool:
    target = _glob_target(url)
    includes = list(include)
    if includes and not any(fnmatch.fnmatchcase(target, pattern) for pattern in includes):
        return False
    return not any(fnmatch.fnmatchcase(target, pattern) for pattern in exclude)


# --- HTML and sitemaps ----------------------------------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.canonical = ""
        self.base = ""
        self.noindex = False
        self.nofollow = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {key: value or "" for key, value in attrs}
        if tag == "a" and attributes.get("href"):
            if "nofollow" not in attributes.get("rel", "").lower().split():
                self.links.append(attributes["href"])
        elif tag == "link" and "canonical" in attributes.get("rel", "").lower().split() and not self.canonical:
            self.canonical = attributes.get("href", "")
        elif tag == "base" and attributes.get("href") and not self.base:
            self.base = attributes["href"]
        elif tag == "meta" and attributes.get("name", "").lower() == "robots":
            words = {word.strip() for word in attributes.get("content", "").lower().split(",")}
            self.noindex = self.noindex or bool(words & {"noindex", "none"})
            self.nofollow = self.nofollow or bool(words & {"nofollow", "none"})


def page_links(body: bytes, url: str) -> _Links:
    parser = _Links()
    try:
        parser.feed(body.decode("utf-8", errors="replace"))
        parser.close()
    except Exception:  # a broken page still gives what was parsed before the break
        logger.debug("link extraction stopped early on %s", url, exc_info=True)
    return parser


def sitemap_entries(body: bytes) -> tuple[list[str], list[str]]:
    """(page URLs, nested sitemap URLs) of a sitemap or sitemap index. Raises ValueError for bad XML."""
    try:
        root = ET.fromstring(body)  # size-bounded; expat refuses entity expansion
    except ET.ParseError as exc:
        raise ValueError(f"not a sitemap: {exc}") from exc
    tag = root.tag.removeprefix(_SITEMAP_NS)
    locs = [
        (element.text or "").strip()
        for element in root.iter()
        if element.tag.removeprefix(_SITEMAP_NS) == "loc" and (element.text or "").strip()
    ]
    if tag == "sitemapindex":
        return [], locs
    if tag == "urlset":
        return locs, []
    raise ValueError(f"not a sitemap: the root element is <{tag}>")


def gunzipped(body: bytes, *, limit: int) -> bytes:
    """`body` decompressed when it is gzip (by its magic bytes, whatever its name or headers say), else as is;
    ValueError past `limit` bytes decompressed (a small file can hold a huge one) or when it is broken."""
    if not body.startswith(_GZIP_MAGIC):
        return body
    decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        out = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"broken gzip ({exc})") from exc
    if len(out) > limit:
        raise ValueError(f"larger than {limit} bytes once decompressed")
    if not decompressor.eof:
        raise ValueError("broken gzip (truncated)")
    return out


def _is_html(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


# --- the crawl -----------------------------------------------------------------------------------------------


class _Pacer:
    """At most one request start per `interval` seconds across the whole crawl."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            loop = asyncio.get_running_loop()
            now = loop.time()
            if self._next > now:
                await asyncio.sleep(self._next - now)
                now = loop.time()
            self._next = max(now, self._next) + self.interval


class Crawler:
    def __init__(
        self,
        config: CrawlConfig,
        *,
        known: Mapping[str, KnownPage] | None = None,
        on_result: ResultCallback | None = None,
        should_stop: Callable[[], bool] | None = None,
        resolver: Resolver = resolve,
    ) -> None:
        self.config = config
        self.known = dict(known or {})
        self.on_result = on_result
        self.should_stop = should_stop or (lambda: False)
        self.resolver = resolver
        self.site = site_of(config.start_url)
        self.summary = CrawlSummary()
        self.robots: RobotFileParser | None = None
        self._pacer = _Pacer(1.0 / config.rate if config.rate > 0 else 0.0)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._seen: set[str] = set()
        self._finals: dict[str, str] = {}  # final URL -> the URL that reached it first
        self._client: httpx.AsyncClient | None = None
        self.stopped = False

    # entry point

    async def run(self) -> CrawlSummary:
        start = normalise(self.config.start_url)
        scheme, host, port = self.site
        if scheme not in ("http", "https") or not host:
            raise CrawlRefused(f"{self.config.start_url!r} is not an http(s) URL")
        reason = await host_check(host, port, internal=self.config.internal, resolver=self.resolver)
        if reason:
            raise CrawlRefused(reason)
        headers = {"User-Agent": self.config.user_agent}
        transport = checked_transport(
            internal=self.config.internal, concurrency=self.config.concurrency, resolver=self.resolver
        )
        async with httpx.AsyncClient(
            headers=headers, follow_redirects=False, transport=transport, trust_env=False
        ) as client:
            self._client = client
            await self._read_robots()
            if self.config.sitemap:
                for url in await self._sitemap_urls(start):
                    self._enqueue(url)
            else:
                self._enqueue(start)
            for url in sorted(self.known):
                self._enqueue(url, force=True)
            workers = [asyncio.create_task(self._worker()) for _ in range(max(1, self.config.concurrency))]
            try:
                await self._queue.join()
            finally:
                for worker in workers:
                    worker.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
        return self.summary

    # discovery

    def _same_site(self, url: str) -> bool:
        return site_of(url) == self.site

    def _enqueue(self, url: str, *, force: bool = False) -> None:
        if not url.startswith(("http://", "https://")):
            return
        url = normalise(url)
        if url in self._seen or not self._same_site(url):
            return
        if not force and len(self._seen) >= self.config.max_pages:
            return
        self._seen.add(url)
        self.summary.discovered += 1
        self._queue.put_nowait(url)

    async def _read_robots(self) -> None:
        scheme, host, port = self.site
        url = normalise(f"{scheme}://{host}:{port}/robots.txt")
        parser = RobotFileParser(url)
        try:
            response, _, body = await self._get(url, {}, max_bytes=512 * 1024)
        except (httpx.HTTPError, TimeoutError, ValueError) as exc:
            # unreachable robots.txt: RFC 9309 says assume complete disallow
            parser.parse(["User-agent: *", "Disallow: /"])
            self.summary.robots = f"unreachable ({type(exc).__name__}): nothing crawled"
            self.robots = parser
            return
        if response.status_code >= 500:
            parser.parse(["User-agent: *", "Disallow: /"])
            self.summary.robots = f"answered {response.status_code}: nothing crawled"
        elif response.status_code >= 400:
            parser.parse([])  # no rules: everything allowed
            self.summary.robots = f"none ({response.status_code})"
        else:
            parser.parse(body.decode("utf-8", errors="replace").splitlines())
            self.summary.robots = "read"
            delay = parser.crawl_delay(self.config.user_agent)
            if delay:
                self._pacer.interval = max(self._pacer.interval, min(float(delay), _MAX_CRAWL_DELAY))
        self.robots = parser

    def _robots_allow(self, url: str) -> bool:
        return self.robots is None or self.robots.can_fetch(self.config.user_agent, url)

    async def _sitemap_urls(self, start: str) -> list[str]:
        pages: list[str] = []
        pending: list[str] = [start]
        done: set[str] = set()
        while pending and len(done) < _MAX_SITEMAPS:
            url = pending.pop(0)
            if url in done or not self._same_site(url):
                continue
            done.add(url)
            response, _, body = await self._get(url, {}, max_bytes=self.config.max_sitemap_bytes)
            if response.status_code != 200:
                raise CrawlRefused(f"the sitemap {url} answered {response.status_code}")
            try:
                found, nested = sitemap_entries(gunzipped(body, limit=self.config.max_sitemap_bytes))
            except ValueError as exc:
                raise CrawlRefused(f"the sitemap {url}: {exc}") from exc
            pages.extend(found)
            pending.extend(normalise(n, url) for n in nested)
        return pages

    # fetching

    async def _worker(self) -> None:
        while True:
            url = await self._queue.get()
            try:
                if self.should_stop():
                    self.stopped = True
                else:
                    await self._report(await self._visit(url))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug on one page must not end the crawl
                logger.exception("crawling %s failed", url)
                await self._report(PageResult(url, "error", detail=f"{type(exc).__name__}: {exc}"))
            finally:
                self._queue.task_done()

    async def _report(self, result: PageResult) -> None:
        self.summary.outcomes[result.outcome] = self.summary.outcomes.get(result.outcome, 0) + 1
        if self.on_result is not None:
            returned = self.on_result(result)
            if returned is not None:
                await returned

    async def _visit(self, url: str) -> PageResult:
        if not url_wanted(url, include=self.config.include, exclude=self.config.exclude):
            return PageResult(url, "excluded", detail="left out by the include/exclude patterns")
        if not self._robots_allow(url):
            return PageResult(url, "excluded", detail="disallowed by robots.txt")
        known = self.known.get(url)
        headers: dict[str, str] = {}
        if known is not None and self.config.conditional:
            if known.etag:
                headers["If-None-Match"] = known.etag
            if known.last_modified:
                headers["If-Modified-Since"] = known.last_modified
        self.summary.asked += 1
        try:
            response, final, body = await self._get(url, headers)
        except CrawlRefused as exc:
            return PageResult(url, "refused", detail=str(exc))
        except (httpx.HTTPError, TimeoutError, ValueError) as exc:
            return PageResult(url, "error", detail=f"{type(exc).__name__}: {exc}"[:500])
        result = PageResult(
            url,
            "fetched",
            final_url=final,
            status=response.status_code,
            etag=response.headers.get("etag", ""),
            last_modified=response.headers.get("last-modified", ""),
            content_type=response.headers.get("content-type", ""),
        )
        return self._classify(result, body)

    def _classify(self, result: PageResult, body: bytes) -> PageResult:
        status = result.status or 0
        if status == 304:
            result.outcome = "not_modified"
            return result
        if status in (404, 410):
            result.outcome, result.detail = "gone", f"answered {status}"
            return result
        if status != 200:
            result.outcome, result.detail = "error", f"answered {status}"
            return result
        if _is_html(result.content_type):
            links = page_links(body, result.final_url)
            base = normalise(links.base, result.final_url) if links.base else result.final_url
            if links.canonical:
                canonical = normalise(links.canonical, base)
                if self._same_site(canonical):
                    result.final_url = canonical
            if links.noindex:
                result.outcome, result.detail = "excluded", "the page asks not to be indexed (meta robots noindex)"
                return result
            if not links.nofollow and not self.config.sitemap:
                for link in links.links:
                    self._enqueue(normalise(link, base))
        first = self._finals.setdefault(result.final_url, result.url)
        if first != result.url:
            result.outcome, result.detail = "duplicate", f"the same page as {first}"
            return result
        result.body = body
        return result

    def _checked_site(self, url: str) -> None:
        # the address is checked by the transport, on every connection (CheckedBackend)
        if not self._same_site(url):
            raise CrawlRefused(f"{url} is not on the source's site")

    async def _get(
        self, url: str, headers: Mapping[str, str], *, max_bytes: int | None = None
    ) -> tuple[httpx.Response, str, bytes]:
        """GET `url`, following same-site redirects by hand: (response, final URL, body). Bounded in time, size
        and hops; a redirect off the site is refused."""
        assert self._client is not None
        limit = max_bytes or self.config.max_bytes
        async with asyncio.timeout(self.config.timeout):
            for _ in range(self.config.max_redirects + 1):
                self._checked_site(url)
                await self._pacer.wait()
                async with self._client.stream("GET", url, headers=dict(headers)) as response:
                    if response.status_code in _REDIRECTS and response.headers.get("location"):
                        url = normalise(response.headers["location"], url)
                        continue
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > limit:
                        raise ValueError(f"larger than {limit} bytes ({declared})")
                    body = bytearray()
                    async for piece in response.aiter_bytes():
                        body += piece
                        if len(body) > limit:
                            raise ValueError(f"larger than {limit} bytes")
                    return response, url, bytes(body)
        raise ValueError(f"more than {self.config.max_redirects} redirects")
