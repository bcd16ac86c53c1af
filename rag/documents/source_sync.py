"""A website source's sync, as the index job runs it: crawl, turn pages into documents, decide what stays.

The crawl (rag.documents.crawler) runs on its own event loop in the job's worker thread. Each fetched page becomes
a document at once (through the loaders, by its content type) and its body is dropped. What the sync decides for
a page the index held before:

- fetched, readable: its document goes to the plan (unchanged text costs nothing: the plan compares hashes of the
  extracted text, so a changed footer date or a rotated session id does not re-embed the page);
- 304 Not Modified: kept as indexed, no body read;
- 404/410 for the first time, a fetch error, a refused or unreadable page: kept, marked stale with the reason;
- 404/410 on a second sync in a row, excluded (patterns, robots.txt, noindex) or a duplicate of another page:
  left out, so the plan deletes it.

The per-URL state (ETag, Last-Modified, content hash, how many 404s in a row) is saved with the document rows, in
the job's last transaction, so a failed or cancelled sync leaves it as it was.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.utils import timezone

from rag.documents.crawler import CrawlConfig, Crawler, CrawlSummary, KnownPage, PageResult
from rag.documents.models import Document, DocumentStatus, Source, SourceKind, SourcePage
from rag.documents.sources import LoadResult
from rag.retrieval.loaders import format_for_path, load_file
from rag.retrieval.markdown import LoadError

logger = logging.getLogger(__name__)

WEB_PREFIX = "web"
_MAX_DOC_ID = 480
_CONTENT_TYPES = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/plain": "text",
    "text/markdown": "markdown",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
}
_SUFFIXES = {"html": ".html", "text": ".txt", "markdown": ".md", "pdf": ".pdf", "docx": ".docx", "xlsx": ".xlsx"}
_SUFFIXES["pptx"] = ".pptx"
_PAGE_FIELDS: tuple[str, ...] = ("doc_id", "etag", "last_modified", "content_hash", "status_code", "outcome")
_PAGE_FIELDS += ("detail", "gone_count", "fetched_at")


def source_prefix(name: str) -> str:
    return f"{WEB_PREFIX}/{name}/"


def url_doc_id(name: str, url: str) -> str:
    """A page's doc_id: the source's prefix and the URL's path (and query); "/" and folder URLs end in "index"."""
    parts = urlsplit(url)
    path = unquote(parts.path).lstrip("/")
    if not path or path.endswith("/"):
        path += "index"
    if parts.query:
        path += f"?{parts.query}"
    doc_id = source_prefix(name) + path
    if len(doc_id) > _MAX_DOC_ID:
        digest = hashlib.sha256(doc_id.encode()).hexdigest()[:16]
        doc_id = f"{doc_id[: _MAX_DOC_ID - 17]}~{digest}"
    return doc_id


def page_format(content_type: str, url: str) -> str:
    kind = content_type.split(";")[0].strip().lower()
    if kind in _CONTENT_TYPES:
        return _CONTENT_TYPES[kind]
    return format_for_path(urlsplit(url).path) or ""


@dataclass(slots=True)
class PageState:
    """What a sync learnt about one URL, saved with the rows."""

    url: str
    doc_id: str
    outcome: str
    status: int | None = None
    detail: str = ""
    etag: str = ""
    last_modified: str = ""
    content_hash: str = ""
    gone_count: int = 0


@dataclass(slots=True)
class SiteCrawl:
    loaded: LoadResult
    pages: list[PageState] = field(default_factory=list)
    summary: CrawlSummary = field(default_factory=CrawlSummary)
    stopped: bool = False


def crawl_config(source: Source, *, full: bool = False) -> CrawlConfig:
    return CrawlConfig(
        start_url=source.url,
        sitemap=source.kind == SourceKind.SITEMAP,
        include=tuple(source.include or ()),
        exclude=tuple(source.exclude or ()),
        max_pages=source.max_pages,
        internal=source.internal,
        rate=source.rate,
        concurrency=max(1, source.concurrency),
        user_agent=settings.SOURCE_CRAWL_USER_AGENT,
        max_bytes=settings.SOURCE_CRAWL_MAX_BYTES,
        timeout=settings.SOURCE_CRAWL_TIMEOUT,
        conditional=not full,
    )


class _PageReader:
    """Turns each crawl result into a document (or a reason) and the URL's new state."""

    def __init__(self, source: Source, folder: Path, previous: dict[str, SourcePage], indexed: set[str]) -> None:
        self.source = source
        self.folder = folder
        self.previous = previous
        self.indexed = indexed
        self.crawl = SiteCrawl(loaded=LoadResult())

    def __call__(self, result: PageResult) -> None:
        self.crawl.pages.append(self._state(result))

    def _state(self, result: PageResult) -> PageState:
        before = self.previous.get(result.url)
        doc_id = before.doc_id if before is not None and before.doc_id else url_doc_id(self.source.name, result.url)
        state = PageState(result.url, doc_id, result.outcome, result.status, result.detail, result.etag)
        state.last_modified = result.last_modified
        kept = self.crawl.loaded.kept
        if result.outcome == "fetched":
            self._read(result, state)
        elif result.outcome == "not_modified" and before is not None:
            state.etag = state.etag or before.etag
            state.last_modified = state.last_modified or before.last_modified
            state.content_hash = before.content_hash
            kept[doc_id] = ""
        elif result.outcome == "gone":
            state.gone_count = (before.gone_count if before is not None else 0) + 1
            if state.gone_count < 2 and doc_id in self.indexed:
                kept[doc_id] = f"{result.detail} once; removed if it does on the next sync too"
        elif result.outcome in ("error", "refused"):
            if before is not None:
                state.etag, state.last_modified = before.etag, before.last_modified
                state.content_hash = before.content_hash
            if doc_id in self.indexed:
                kept[doc_id] = result.detail[:500]
        return state

    def _read(self, result: PageResult, state: PageState) -> None:
        fmt = page_format(result.content_type, result.final_url or result.url)
        loaded = self.crawl.loaded
        if not fmt:
            state.outcome, state.detail = "skipped", f"unsupported content type {result.content_type or '?'}"
            loaded.skipped.append(LoadError(Path(result.url), state.detail))
            return
        file = self.folder / f"page{_SUFFIXES.get(fmt, '')}"
        file.write_bytes(result.body)
        errors: list[LoadError] = []
        documents = load_file(file, doc_id=state.doc_id, format=fmt, errors=errors)
        file.unlink(missing_ok=True)
        if errors or not documents:
            reason = errors[0].reason if errors else "no document in the page"
            state.outcome, state.detail = "unreadable", reason[:500]
            loaded.skipped.append(LoadError(Path(result.url), reason))
            if state.doc_id in self.indexed:
                loaded.kept[state.doc_id] = reason[:500]
            return
        link = result.final_url or result.url
        for document in documents[:1]:  # one page, one document
            digest = hashlib.sha256(f"{link}\n{document.title}\n{document.text}".encode()).hexdigest()
            state.content_hash = digest
            loaded.documents.append(replace(document, url=link, content_hash=digest, source_path=link))
            loaded.formats[state.doc_id] = fmt


def site_crawl(
    *,
    source: Source,
    full: bool = False,
    stop: threading.Event | None = None,
    on_tick: Callable[[list[PageState]], None] | None = None,
    tick: float = 0.3,
) -> SiteCrawl:
    """Crawl `source`. Blocking: the crawl runs its own event loop on a thread of its own (no database there),
    while this thread calls `on_tick(pages so far)` every `tick` seconds (progress, cancel checks: set `stop`)."""
    previous = {page.url: page for page in SourcePage.objects.filter(source=source)}
    indexed = set(
        Document.objects.filter(doc_id__startswith=source_prefix(source.name))
        .exclude(status=DocumentStatus.DELETED)
        .values_list("doc_id", flat=True)
    )
    # only pages the index holds are asked for conditionally: a 304 for a page it lost would keep it out for good
    known = {
        url: KnownPage(url, page.etag, page.last_modified) if page.doc_id in indexed else KnownPage(url)
        for url, page in previous.items()
        if page.doc_id in indexed or page.gone_count
    }
    stop = stop or threading.Event()
    config = crawl_config(source, full=full)
    failure: list[BaseException] = []
    with tempfile.TemporaryDirectory(prefix="rag-crawl-") as folder:
        reader = _PageReader(source, Path(folder), previous, indexed)
        crawler = Crawler(config, known=known, on_result=reader, should_stop=stop.is_set)

        def run() -> None:
            try:
                reader.crawl.summary = asyncio.run(crawler.run())
            except BaseException as exc:  # handed to the job's thread, which raises it
                failure.append(exc)

        thread = threading.Thread(target=run, name=f"rag-crawl-{source.name}", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(timeout=tick)
            if on_tick is not None:
                on_tick(list(reader.crawl.pages))
    if failure:
        raise failure[0]
    reader.crawl.stopped = crawler.stopped
    return reader.crawl


def source_pages_save(*, source: Source, pages: list[PageState]) -> None:
    """Write what the sync learnt per URL (inside the job's last transaction). URLs the site no longer answers for
    and that left the index are forgotten."""
    now = timezone.now()
    existing = {page.url: page for page in SourcePage.objects.filter(source=source)}
    # one statement says every page was checked now; only pages whose state changed are rewritten
    SourcePage.objects.filter(source=source).update(fetched_at=now)
    create: list[SourcePage] = []
    update: list[SourcePage] = []
    for state in pages:
        row = existing.get(state.url) or SourcePage(source=source, url=state.url[:2000])
        before = tuple(getattr(row, name) for name in _PAGE_FIELDS[:-1])
        row.doc_id = state.doc_id
        row.etag, row.last_modified = state.etag[:500], state.last_modified[:100]
        row.content_hash, row.status_code, row.outcome = state.content_hash, state.status, state.outcome
        row.detail, row.gone_count, row.fetched_at = state.detail[:500], state.gone_count, now
        if not row.pk:
            create.append(row)
        elif tuple(getattr(row, name) for name in _PAGE_FIELDS[:-1]) != before:
            update.append(row)
    SourcePage.objects.bulk_create(create, batch_size=500)
    SourcePage.objects.bulk_update(update, _PAGE_FIELDS, batch_size=500)
    # a page gone twice (or excluded) is out of the index: nothing to ask for again
    SourcePage.objects.filter(source=source, gone_count__gte=2).delete()
    SourcePage.objects.filter(source=source, outcome__in=("excluded", "duplicate")).delete()
