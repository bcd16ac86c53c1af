"""A real HTTP server on loopback serving an editable website: what crawler and source-sync tests (and the crawl
benchmark) crawl instead of the network.

    with LocalSite({"/": html("Home", '<a href="/fees.html">fees</a>'), "/fees.html": html("Fees", "...")}) as site:
        site.url("/")            # http://127.0.0.1:PORT/
        site.pages["/new.html"] = html(...)   # edit between syncs
        site.hits["/fees.html"]  # how many GETs, and site.not_modified[...] how many of them were 304s

Each page answers with an ETag (its body's hash) and a Last-Modified, and honours If-None-Match and
If-Modified-Since with a 304. `redirects` maps a path to where it redirects (301); `status` forces a status for a
path (404, 410, 500). robots.txt is whatever `pages["/robots.txt"]` holds (404 when absent).
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

from devtools.simulator.testing import free_port


@dataclass(frozen=True, slots=True)
class Page:
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    modified: float = 1_700_000_000.0


def html(title: str, body: str, *, lang: str = "en", head: str = "") -> Page:
    text = (
        f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title>{head}</head>'
        f"<body><nav><a href='/'>Home</a></nav><main><h1>{title}</h1>{body}</main>"
        f"<footer>Copyright</footer></body></html>"
    )
    return Page(text.encode())


def sitemap(urls: list[str]) -> Page:
    entries = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    body = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    return Page(body.encode(), "application/xml")


def sitemap_index(urls: list[str]) -> Page:
    entries = "".join(f"<sitemap><loc>{url}</loc></sitemap>" for url in urls)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'
    )
    return Page(body.encode(), "application/xml")


class LocalSite:
    def __init__(self, pages: dict[str, Page] | None = None, *, host: str = "127.0.0.1") -> None:
        self.pages: dict[str, Page] = dict(pages or {})
        self.redirects: dict[str, str] = {}
        self.status: dict[str, int] = {}
        self.hits: Counter[str] = Counter()
        self.not_modified: Counter[str] = Counter()
        self.user_agents: set[str] = set()
        self.host = host
        self.port = free_port(host)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def __enter__(self) -> Self:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def do_GET(self) -> None:
                site.answer(self)

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-site", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path
        self.hits[path] += 1
        self.user_agents.add(handler.headers.get("User-Agent", ""))
        if path in self.redirects:
            self._send(handler, 301, b"", headers={"Location": self.redirects[path]})
            return
        page = self.pages.get(path)
        forced = self.status.get(path)
        if forced is not None or page is None:
            self._send(handler, forced or 404, b"not found", headers={"Content-Type": "text/plain"})
            return
        etag = '"' + hashlib.sha256(page.body).hexdigest()[:16] + '"'
        modified = formatdate(page.modified, usegmt=True)
        if handler.headers.get("If-None-Match") == etag or (
            not handler.headers.get("If-None-Match") and handler.headers.get("If-Modified-Since") == modified
        ):
            self.not_modified[path] += 1
            self._send(handler, 304, b"", headers={"ETag": etag})
            return
        headers = {"Content-Type": page.content_type, "ETag": etag, "Last-Modified": modified}
        self._send(handler, 200, page.body, headers=headers)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, *, headers: dict[str, str]) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if body:
            handler.wfile.write(body)
