"""The body of an index job: load the sources, plan an incremental build, build and switch, then the rows.

Which documents can be reused is read from the live build itself (each point carries its document's content
hash and source), not only from the Document rows: the index is what gets copied, so it is the authority, and
an index built before these rows existed (the demo corpus, an older checkout) is reused all the same. The rows
are rewritten to mirror the new build in one transaction after the switch. A failure or a cancel before the
switch leaves the live index and the rows as they were.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from rag.documents.crawler import CrawlRefused
from rag.documents.hooks import documents_reindexed_notify
from rag.documents.links import links_applied, source_folder
from rag.documents.models import (
    TEXT_PREVIEW_CHARS,
    Chunk,
    Document,
    DocumentStatus,
    IndexJob,
    JobStatus,
    Source,
    SourceKind,
)
from rag.documents.services import JobCancelled, JobTracker, bounded, db_retry
from rag.documents.source_sync import PageState, SiteCrawl, site_crawl, source_pages_save, source_prefix
from rag.documents.sources import LoadResult, chunking_for, corpus_dir, format_of, in_scope, load_sources
from rag.errors import PipelineAbort
from rag.retrieval.embedding import Embedder, index_batch_size
from rag.retrieval.indexer import (
    IndexCancelled,
    IndexedChunk,
    LiveDocument,
    ReindexReport,
    build_compatible,
    live_documents,
    reindex,
)
from rag.retrieval.markdown import Document as SourceDocument
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore
from rag.text.links import http_link

logger = logging.getLogger(__name__)


class JobFailed(Exception):
    """The job cannot do what was asked (no documents, every path missing...); the message says why."""


@dataclass(slots=True)
class ReindexPlan:
    embed: list[SourceDocument] = field(default_factory=list)
    copy: set[str] = field(default_factory=set)
    reencode: set[str] = field(default_factory=set)
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # doc_id -> why its source could not be read


def plan_reindex(
    *,
    loaded: LoadResult,
    live: Mapping[str, LiveDocument],
    known_sources: Mapping[str, tuple[str, str]],
    scope: list[Path],
    job_format: str,
    full: bool,
    compatible: bool,
    owns: Callable[[str], bool] | None = None,
) -> ReindexPlan:
    """What to embed, copy, re-encode and delete. `known_sources` is doc_id -> (source, format) from the rows,
    for builds whose payloads do not carry the source. `owns(doc_id)`, when given, says which live documents the
    job answers for (a website source's pages) instead of the paths in `scope`."""
    plan = ReindexPlan()
    reuse = compatible and not full
    by_id = {document.doc_id: document for document in loaded.documents}
    for document in loaded.documents:
        previous = live.get(document.doc_id)
        if previous is None:
            plan.added.append(document.doc_id)
            plan.embed.append(document)
        elif previous.content_hash != document.content_hash:
            plan.updated.append(document.doc_id)
            plan.embed.append(document)
        else:
            plan.unchanged.append(document.doc_id)
            if reuse:
                plan.copy.add(document.doc_id)
            else:
                plan.embed.append(document)
    # by resolved and by plain absolute path: a source may have been replaced by a link since it was indexed
    unreadable = {str(Path(e.path).resolve()): e.reason for e in loaded.skipped}
    unreadable.update({str(Path(e.path).absolute()): e.reason for e in loaded.skipped})
    for doc_id, previous in live.items():
        if doc_id in by_id:
            continue
        if doc_id in loaded.kept:
            # read before and not changed (or not readable this time): the indexed version stays
            if loaded.kept[doc_id]:
                plan.stale[doc_id] = loaded.kept[doc_id]
            else:
                plan.unchanged.append(doc_id)
            (plan.copy if reuse else plan.reencode).add(doc_id)
            continue
        if owns is not None:
            if owns(doc_id):
                plan.deleted.append(doc_id)
            else:
                (plan.copy if reuse else plan.reencode).add(doc_id)
            continue
        source, source_format = previous.source, ""
        if doc_id in known_sources:
            row_source, source_format = known_sources[doc_id]
            source = source or row_source
        if in_scope(source, scope, job_format=job_format, source_format=source_format):
            if source in unreadable and Path(source).exists():
                # the file is still there but unreadable now: keep the version that was indexed
                plan.stale[doc_id] = unreadable[source]
            else:
                plan.deleted.append(doc_id)
                continue
        # not this job's business (another folder, uploads...): carried over into the new build
        (plan.copy if reuse else plan.reencode).add(doc_id)
    return plan


def _known_sources() -> dict[str, tuple[str, str]]:
    rows = Document.objects.exclude(status=DocumentStatus.DELETED).values_list("doc_id", "source", "source_format")
    return {doc_id: (source, fmt) for doc_id, source, fmt in rows}


def index_job_execute(
    *, job: IndexJob, store: VectorStore, embedder: Embedder, stop: threading.Event | None = None
) -> IndexJob:
    """Run a claimed (running) index job to its end: succeeded, failed or cancelled. Blocking: run it in a
    thread. Never raises for the job's own failures; they are written to the row."""
    tracker = JobTracker(job, stop=stop)
    started = time.perf_counter()
    try:
        _execute(job, tracker, store, embedder, started)
    except (JobCancelled, IndexCancelled):
        tracker.finish(JobStatus.CANCELLED, error="cancelled on request; the live index is unchanged")
    except JobFailed as exc:
        tracker.finish(JobStatus.FAILED, error=str(exc))
    except PipelineAbort as exc:
        # the embedding server failed (its message names the endpoint); raised before the switch, always
        logger.error("index job #%s failed: %s", job.pk, exc.message)
        what = exc.message.rstrip(".")
        tracker.finish(JobStatus.FAILED, error=f"{what}. The build was dropped; the live index is unchanged.")
    except Exception as exc:
        logger.exception("index job #%s failed", job.pk)
        tracker.finish(JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
    job.refresh_from_db()
    return job


def _execute(job: IndexJob, tracker: JobTracker, store: VectorStore, embedder: Embedder, started: float) -> None:
    """Load the scope, plan what changed, build and switch the index, save the rows: each step checks for a
    cancel request until the switch; after it the job succeeds."""
    if job.if_empty and _already_filled(tracker, store):
        return
    work = _job_work(job, tracker)
    # each document's link: set by staff, its own, or its folder's base URL + its path (rag.documents.links)
    work.loaded.documents = links_applied(work.loaded.documents)
    loaded, scope = work.loaded, work.scope
    if job.remove_source and not _owned_live(work):
        tracker.log(f"source {job.source_name} has no document in the index")
        _save_source_only(job, tracker, work)
        return
    encoder = BM25Encoder()
    plan = _plan(job, tracker, store, embedder, encoder, loaded, scope, owns=work.owns)
    tracker.stage("embedding")
    report = reindex(
        store,
        embedder,
        embed=plan.embed,
        copy=plan.copy,
        reencode=plan.reencode,
        encoder=encoder,
        config=lambda document: chunking_for(loaded.formats.get(document.doc_id, "")),
        batch_size=index_batch_size(embedder),
        progress=tracker.progress,
        should_stop=tracker.cancelled,
        # a cancel requested any time before the switch is honoured, however fast the build was
        confirm_switch=lambda: not tracker.cancelled(look=True),
        # removing the last documents (the demo's, say) leaves an empty index, which is what was asked
        allow_empty=bool(plan.deleted),
    )
    # switched: from here on the job succeeds; a late cancel request is ignored
    tracker.stage("saving")
    summary = _summary(loaded, plan, report, started)
    summary.update(work.report)
    _save(job, tracker, loaded, plan, report, summary, after=work.after_save)


def _owned_live(work: JobWork) -> bool:
    return work.owns is not None and any(
        work.owns(doc_id)
        for doc_id in Document.objects.exclude(status=DocumentStatus.DELETED).values_list("doc_id", flat=True)
    )


def _save_source_only(job: IndexJob, tracker: JobTracker, work: JobWork) -> None:
    def save() -> None:
        with transaction.atomic():
            if work.after_save is not None:
                work.after_save()
            tracker.finish(JobStatus.SUCCEEDED, report=work.report)

    db_retry(save)


@dataclass(slots=True)
class JobWork:
    """What a job reads and answers for: the loaded documents, the paths or the test for the documents it owns
    (deleted when not read again), and what it saves beside the rows."""

    loaded: LoadResult
    scope: list[Path]
    owns: Callable[[str], bool] | None = None
    after_save: Callable[[], None] | None = None
    report: dict[str, Any] = field(default_factory=dict)


def _job_work(job: IndexJob, tracker: JobTracker) -> JobWork:
    source = job.source
    if source is None:
        if job.source_name:
            raise JobFailed(f"the source {job.source_name!r} no longer exists")
        scope = [Path(p) for p in job.paths] or [corpus_dir()]
        return JobWork(_load(job, tracker, scope), scope)
    report: dict[str, Any] = {"source": source.name, "removed": job.remove_source}
    if source.kind in (SourceKind.WEBSITE, SourceKind.SITEMAP):
        prefix = source_prefix(source.name)

        def owns(doc_id: str) -> bool:
            return doc_id.startswith(prefix)

        if job.remove_source:
            return JobWork(LoadResult(), [], owns, lambda: _source_delete(source), report)
        crawl = _crawl(job, tracker, source)
        report.update(robots=crawl.summary.robots, asked=crawl.summary.asked, outcomes=crawl.summary.outcomes)
        report["pages"] = bounded([{"url": p.url, "outcome": p.outcome, "detail": p.detail} for p in crawl.pages])
        return JobWork(crawl.loaded, [], owns, lambda: _source_synced(source, crawl.pages), report)
    folder = source_folder(source)
    if job.remove_source and source.kind == SourceKind.UPLOADS:
        # the uploads source holds the uploads' base URL only: removing it leaves the uploaded documents indexed
        return JobWork(LoadResult(), [], lambda doc_id: False, lambda: _source_delete(source), report)
    if job.remove_source:
        rows = Document.objects.exclude(status=DocumentStatus.DELETED).values_list("doc_id", "source")
        owned = {doc_id for doc_id, path in rows if path and Path(path).is_relative_to(folder)}
        return JobWork(LoadResult(), [folder], owned.__contains__, lambda: _source_delete(source), report)
    loaded = _load(job, tracker, [folder])
    return JobWork(loaded, [folder], None, lambda: _source_synced(source, []), report)


def _crawl(job: IndexJob, tracker: JobTracker, source: Source) -> SiteCrawl:
    tracker.stage("crawling")
    stop = threading.Event()
    logged = 0

    def on_tick(pages: list[PageState]) -> None:
        nonlocal logged
        for state in pages[logged:]:
            if state.outcome not in ("fetched", "not_modified"):
                tracker.log(f"{state.outcome} {state.url}: {state.detail}")
        logged = len(pages)
        tracker.progress(len(pages), max(len(pages) + 1, source.max_pages))
        if tracker.cancelled():
            stop.set()

    try:
        crawl = site_crawl(source=source, full=job.full, stop=stop, on_tick=on_tick)
    except CrawlRefused as exc:
        raise JobFailed(str(exc)) from exc
    on_tick(crawl.pages)
    if crawl.stopped:
        raise JobCancelled
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(crawl.summary.outcomes.items()))
    tracker.log(f"crawled {source.url}: {counts or 'nothing'} (robots.txt: {crawl.summary.robots})")
    return crawl


def _source_synced(source: Source, pages: list[PageState]) -> None:
    if pages:
        source_pages_save(source=source, pages=pages)
    Source.objects.filter(pk=source.pk).update(last_sync_at=timezone.now())


def _source_delete(source: Source) -> None:
    Source.objects.filter(pk=source.pk).delete()


def _already_filled(tracker: JobTracker, store: VectorStore) -> bool:
    """`--if-empty`: finish the job at once when the index holds chunks."""
    count = store.count()
    if not count:
        return False
    tracker.log(f"{store.alias} already holds {count} chunks; nothing to do (--if-empty).")
    tracker.finish(JobStatus.SUCCEEDED, chunks=count, report={"if_empty": True, "chunks": count})
    return True


def _load(job: IndexJob, tracker: JobTracker, scope: list[Path]) -> LoadResult:
    tracker.stage("loading")
    tracker.set(progress_total=len(scope))
    entries = 0

    def on_entry(path: Path) -> None:
        nonlocal entries
        tracker.set(progress_done=entries)
        tracker.check()
        entries += 1

    loaded = load_sources(scope, format=job.format, on_entry=on_entry)
    for error in _skipped(loaded):
        tracker.log(f"skipped {error.path}: {error.reason}")
    for path in loaded.missing:
        tracker.log(f"gone: {path} (its documents are removed from the index)")
    tracker.check()
    return loaded


def _plan(
    job: IndexJob,
    tracker: JobTracker,
    store: VectorStore,
    embedder: Embedder,
    encoder: BM25Encoder,
    loaded: LoadResult,
    scope: list[Path],
    *,
    owns: Callable[[str], bool] | None = None,
) -> ReindexPlan:
    """What to embed, copy, re-encode and delete; fails the job when the scope holds nothing to index."""
    tracker.stage("planning")
    live = live_documents(store)
    compatible = build_compatible(store.metadata(), embedder, encoder)
    if live and not compatible:
        tracker.log("the live index was built with another embedder or tokenizer: every document is re-embedded")
    plan = plan_reindex(
        loaded=loaded,
        live=live,
        known_sources=_known_sources(),
        scope=scope,
        job_format=job.format,
        full=job.full,
        compatible=compatible,
        owns=owns,
    )
    if not loaded.documents and not plan.deleted and not (owns is not None and loaded.kept):
        if owns is not None:
            raise JobFailed("the source gave no page that could be indexed; the log lists each URL and why")
        if len(loaded.missing) == len(scope):
            raise JobFailed(f"no such file or folder: {', '.join(map(str, scope))}")
        raise JobFailed(f"no documents to index in {', '.join(map(str, scope))}")
    tracker.log(
        f"plan: {len(plan.added)} added, {len(plan.updated)} updated, {len(plan.unchanged)} unchanged, "
        f"{len(plan.deleted)} deleted; {len(plan.embed)} to embed, {len(plan.copy)} copied, "
        f"{len(plan.reencode)} re-encoded"
    )
    return plan


def _skipped(loaded: LoadResult) -> list[Any]:
    """The files that could not be read. A path the job was given that is gone is not one of them: its
    documents are deleted (that is how a delete is asked for), which the report counts as deleted."""
    gone = set(loaded.missing)
    return [error for error in loaded.skipped if Path(error.path) not in gone]


def _summary(loaded: LoadResult, plan: ReindexPlan, report: ReindexReport, started: float) -> dict[str, Any]:
    """The job's report: what the build did and which documents it touched (lists bounded)."""
    return {
        "documents": report.documents,
        "chunks": report.chunks,
        "embedded": report.embedded,
        "reencoded": report.reencoded,
        "copied": report.copied,
        "collection": report.collection,
        "replaced": report.replaced or "",
        "seconds": round(time.perf_counter() - started, 3),
        "added": bounded(plan.added),
        "updated": bounded(plan.updated),
        "deleted": bounded(plan.deleted),
        "stale": bounded(sorted(plan.stale)),
        "skipped_files": bounded([{"path": str(e.path), "reason": e.reason} for e in _skipped(loaded)]),
    }


def _save(
    job: IndexJob,
    tracker: JobTracker,
    loaded: LoadResult,
    plan: ReindexPlan,
    report: ReindexReport,
    summary: dict[str, Any],
    *,
    after: Callable[[], None] | None = None,
) -> None:
    """Mirror the new build in the Document rows and finish the job, in one transaction (retried). `after` writes
    what else the job learnt (a source's per-URL state) in the same transaction."""
    changed = [*plan.updated, *plan.deleted]

    def save() -> None:
        with transaction.atomic():
            documents_sync(job=job, loaded=loaded, plan=plan, report=report)
            if after is not None:
                after()
            tracker.finish(
                JobStatus.SUCCEEDED,
                added=len(plan.added),
                updated=len(plan.updated),
                unchanged=len(plan.unchanged),
                deleted=len(plan.deleted),
                skipped=len(_skipped(loaded)),
                chunks=report.chunks,
                chunks_embedded=report.embedded + report.reencoded,
                collection=report.collection,
                report=summary,
            )
            transaction.on_commit(lambda: documents_reindexed_notify(changed))

    try:
        db_retry(save)
    except Exception as exc:
        # the new index is live already; the next reindex rewrites the rows from it
        logger.exception("index job #%s switched to %s but its rows were not saved", job.pk, report.collection)
        raise JobFailed(
            f"the index was switched to {report.collection}, but saving the document rows failed "
            f"({type(exc).__name__}: {exc}); the next reindex repairs them"
        ) from exc


def documents_sync(*, job: IndexJob, loaded: LoadResult, plan: ReindexPlan, report: ReindexReport) -> None:
    """Rewrite the Document and Chunk rows to mirror the new build. Call inside a transaction."""
    now = timezone.now()
    sources = {document.doc_id: document for document in loaded.documents}
    rewritten = {document.doc_id for document in plan.embed} | plan.reencode
    in_build = set(report.chunks_by_doc)
    rows = {row.doc_id: row for row in _rows_by_doc_id(in_build | set(plan.deleted))}
    chunk_counts = _chunk_counts(in_build)
    to_create: list[Document] = []
    to_update: list[Document] = []
    refill: set[str] = set()
    for doc_id, chunks in report.chunks_by_doc.items():
        row = rows.get(doc_id)
        created = row is None
        if row is None:
            row = Document(doc_id=doc_id)
        before = None if created else _row_state(row)
        _fill(row, sources.get(doc_id), loaded, report, created=created, stale=plan.stale.get(doc_id))
        row.chunk_count = len(chunks)
        row.updated_at = now  # bulk_update does not apply auto_now
        if created or doc_id in rewritten or row.indexed_at is None:
            row.indexed_at = now
            row.last_job = job
        if created or doc_id in rewritten or chunk_counts.get(doc_id) != len(chunks):
            refill.add(doc_id)
        if created:
            to_create.append(row)
        elif _row_state(row) != before:
            # an unchanged row is not written: a re-sync where nothing changed writes no document row
            row.updated_at = now
            to_update.append(row)
    for doc_id in plan.deleted:
        row = rows.get(doc_id)
        if row is not None:
            row.status, row.status_detail, row.chunk_count, row.last_job = DocumentStatus.DELETED, "", 0, job
            row.updated_at = now
            to_update.append(row)
    Document.objects.bulk_create(to_create, batch_size=500)
    Document.objects.bulk_update(
        to_update,
        [
            "source",
            "source_format",
            "title",
            "url",
            "language",
            "tags",
            "kind",
            "form_id",
            "form_file",
            "content_hash",
            "chunk_count",
            "status",
            "status_detail",
            "indexed_at",
            "last_job",
            "updated_at",
        ],
        batch_size=500,
    )
    # rows the new build does not hold (deleted before, or out of step with the index) are marked deleted
    gone = [
        pk
        for pk, doc_id in Document.objects.exclude(status=DocumentStatus.DELETED).values_list("pk", "doc_id")
        if doc_id not in in_build
    ]
    for batch in _batches(gone):
        Document.objects.filter(pk__in=batch).update(status=DocumentStatus.DELETED, chunk_count=0, updated_at=now)
    Chunk.objects.filter(document__status=DocumentStatus.DELETED).delete()
    ids = {row.doc_id: row.pk for row in _rows_by_doc_id(refill)}
    for batch in _batches(list(ids.values())):
        Chunk.objects.filter(document_id__in=batch).delete()
    Chunk.objects.bulk_create(
        [_chunk_row(ids[doc_id], chunk) for doc_id in refill for chunk in report.chunks_by_doc[doc_id]],
        batch_size=500,
    )


_ROW_FIELDS = (
    "source", "source_format", "title", "url", "language", "tags", "kind", "form_id", "form_file",
    "content_hash", "chunk_count", "status", "status_detail", "indexed_at", "last_job_id",
)  # fmt: skip


def _row_state(row: Document) -> tuple[Any, ...]:
    return tuple(getattr(row, name) for name in _ROW_FIELDS)


def _batches(items: list[Any], size: int = 500) -> Iterable[list[Any]]:
    # SQLite builds may cap a statement's parameters at 999
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _rows_by_doc_id(doc_ids: Iterable[str]) -> list[Document]:
    rows: list[Document] = []
    for batch in _batches(sorted(doc_ids)):
        rows.extend(Document.objects.filter(doc_id__in=batch))
    return rows


def _chunk_counts(doc_ids: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for batch in _batches(sorted(doc_ids)):
        rows = (
            Chunk.objects.filter(document__doc_id__in=batch)
            .values("document__doc_id")
            .annotate(n=Count("id"))
            .values_list("document__doc_id", "n")
        )
        counts.update(rows)
    return counts


def _fill(
    row: Document,
    source: SourceDocument | None,
    loaded: LoadResult,
    report: ReindexReport,
    *,
    created: bool,
    stale: str | None,
) -> None:
    """A row's fields from the document read this time (or, for a new row, the build's payload) and its status."""
    if source is not None:
        _fill_from_source(row, source, loaded.formats.get(row.doc_id, ""))
    elif created:
        _fill_from_payload(row, report.document_fields.get(row.doc_id, {}))
    if stale is not None:
        row.status, row.status_detail = DocumentStatus.STALE, stale[:500]
    else:
        row.status, row.status_detail = DocumentStatus.INDEXED, ""


def _fill_from_source(row: Document, document: SourceDocument, fmt: str) -> None:
    row.source = document.source_path[:1000]
    row.source_format = fmt or format_of(document.source_path)
    row.title = document.title[:500]
    row.url = http_link(document.url)
    row.language = document.language
    row.tags = list(document.tags)
    row.kind = document.kind
    row.form_id = document.form_id[:100]
    row.form_file = document.form_file[:500]
    row.content_hash = document.content_hash


def _fill_from_payload(row: Document, payload: Mapping[str, object]) -> None:
    row.source = str(payload.get("source", "") or "")[:1000]
    row.source_format = format_of(row.source)
    row.title = str(payload.get("title", "") or row.doc_id)[:500]
    row.url = http_link(payload.get("url", ""))
    row.language = str(payload.get("language", "") or "")
    tags = payload.get("tags")
    row.tags = [str(t) for t in tags] if isinstance(tags, list) else []
    row.kind = str(payload.get("kind", "") or "article")
    row.form_id = str(payload.get("form_id", "") or "")[:100]
    row.form_file = str(payload.get("form_file", "") or "")[:500]
    row.content_hash = str(payload.get("content_hash", "") or "")


def _chunk_row(document_pk: int, chunk: IndexedChunk) -> Chunk:
    described_at = None
    if chunk.described_at:
        try:
            described_at = datetime.fromisoformat(chunk.described_at)
        except ValueError:
            described_at = None
    return Chunk(
        document_id=document_pk,
        ordinal=chunk.ordinal,
        chunk_id=chunk.chunk_id[:600],
        point_id=chunk.point_id,
        heading=chunk.heading[:1000],
        text_preview=chunk.text[:TEXT_PREVIEW_CHARS],
        description_zh=chunk.description_zh if described_at else "",
        description_en=chunk.description_en if described_at else "",
        described_at=described_at,
    )
