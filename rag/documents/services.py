"""Writes of the documents app: creating, claiming, cancelling and tracking index and backfill jobs.

A job is a row; whichever process owns the vector store claims it and runs it (rag.documents.runner in the
server, the command itself when no server runs). Claims are atomic and one job runs at a time across processes:
two jobs writing the same index would lose each other's work. The job bodies are in rag.documents.indexing
(reindex) and rag.documents.backfill.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

from django.core.exceptions import SuspiciousFileOperation
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from django.utils.text import get_valid_filename

from rag.documents.models import (
    JOB_LOG_LIMIT,
    BackfillJob,
    Document,
    IndexJob,
    Job,
    JobRunnerHeartbeat,
    JobStatus,
    Source,
    SourceKind,
    SourcePage,
)
from rag.documents.source_sync import WEB_PREFIX
from rag.documents.sources import (
    FORMATS,
    UPLOAD_SUFFIXES,
    PathNotAllowed,
    format_of,
    path_allowed,
    screen_file,
    uploads_dir,
)
from rag.text.links import http_link

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
JOB_MODELS: tuple[type[Job], ...] = (IndexJob, BackfillJob)
# A running job's heartbeat is refreshed every few seconds by its runner; this long without one means the
# process died (killed, crashed machine) and the job will never finish by itself.
ABANDONED_AFTER = timedelta(seconds=60)
RUNNER_ALIVE_WITHIN = timedelta(seconds=15)
# pg_advisory_xact_lock key serialising claims on PostgreSQL ("ragjobs" in ASCII)
_CLAIM_LOCK_KEY = 0x7261676A6F6273
_REPORT_LIST_LIMIT = 200
MAX_UPLOAD_BYTES = 20 * 1024 * 1024


class JobCancelled(Exception):
    """Raised inside a job body when a cancel was requested; the job ends as cancelled."""


def db_retry(fn: Callable[..., T], /, *args: Any, attempts: int = 6, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, tried again when SQLite reports a lock. Job writes and a follower's reads come from
    different threads and processes; a lock that outlasts the busy timeout is transient, not a failed job."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


def retry_locked(fn: Callable[P, T]) -> Callable[P, T]:
    """`db_retry` for every call of `fn`: the job machinery's writes, which run beside each other."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return db_retry(functools.partial(fn, *args, **kwargs))

    return wrapper


def runner_name() -> str:
    """This process, as job rows and heartbeats name it."""
    return f"{socket.gethostname()}:{os.getpid()}"


# --- uploads -------------------------------------------------------------------------------------------------


class UploadRefused(ValueError):
    """A file the uploads folder does not take; the message says why."""


def upload_save(*, name: str, chunks: Iterable[bytes], max_bytes: int = MAX_UPLOAD_BYTES) -> Path:
    """Write an uploaded file into the uploads folder (a file of the same name is replaced, which is how a
    revised document is re-uploaded). The name is reduced to safe characters; the write is atomic."""
    try:
        # a leading dot would hide the file from the loaders, which skip hidden files
        safe = get_valid_filename(Path(name).name).lstrip(".")
    except SuspiciousFileOperation:
        safe = ""
    suffix = Path(safe).suffix.lower()
    if not Path(safe).stem:
        raise UploadRefused(f"{name!r} is not a usable file name")
    if suffix not in UPLOAD_SUFFIXES:
        raise UploadRefused(f"{name}: only {', '.join(sorted(UPLOAD_SUFFIXES))} files can be indexed")
    folder = uploads_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / safe
    partial = folder / f".{safe}.{uuid.uuid4().hex}.part"
    size = 0
    try:
        with partial.open("wb") as handle:
            for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise UploadRefused(f"{name}: larger than {max_bytes // (1024 * 1024)} MB")
                handle.write(chunk)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target.resolve()


def document_sources_delete(*, sources: Iterable[str], created_by: Any = None, created_from: str = "") -> IndexJob:
    """Delete documents: remove their source files and start the index job that drops them from the index.

    An index job over a path it no longer finds deletes the documents read from it, so the index, the replica of
    every worker and the rows follow the files. `sources` are the documents' `source` paths; each must lie in the
    corpus or uploads folder (PathNotAllowed otherwise, before any file is touched). A file already gone is fine.
    """
    paths = sorted({path_allowed(source) for source in sources})
    if not paths:
        raise PathNotAllowed("no document source to delete")
    for path in paths:
        path.unlink(missing_ok=True)
    return index_job_create(paths=paths, created_by=created_by, created_from=created_from)


# --- creating and cancelling ---------------------------------------------------------------------------------


@retry_locked
def index_job_create(
    *,
    paths: Sequence[str | Path] = (),
    format: str = "auto",
    full: bool = False,
    if_empty: bool = False,
    created_by: Any = None,
    created_from: str = "",
) -> IndexJob:
    """A pending reindex of `paths` (absolute paths; none means CORPUS_DIR). Callers check where the paths are."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    return IndexJob.objects.create(
        paths=[str(p) for p in paths],
        format=format,
        full=full,
        if_empty=if_empty,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        created_from=created_from,
    )


@retry_locked
def backfill_job_create(*, limit: int | None = None, created_by: Any = None, created_from: str = "") -> BackfillJob:
    if limit is not None and limit < 1:
        raise ValueError("limit must be at least 1")
    return BackfillJob.objects.create(
        limit=limit,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        created_from=created_from,
    )


@retry_locked
def job_cancel(*, job: Job) -> bool:
    """Ask a job to stop. A pending job is cancelled at once; a running one stops at its next batch (its live
    index and rows stay as they were). Returns False when the job had already finished."""
    model = type(job)
    now = timezone.now()
    with transaction.atomic():
        if model.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(
            status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now, error="cancelled before it started"
        ):
            job.refresh_from_db()
            return True
        changed = model.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(cancel_requested=True)
    job.refresh_from_db()
    return bool(changed)


# --- claiming ------------------------------------------------------------------------------------------------


def _serialize_claims() -> None:
    # SQLite: the project's transactions are BEGIN IMMEDIATE, which already lets one writer in at a time.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CLAIM_LOCK_KEY])


def jobs_abandoned_fail(*, store_owner: str = "") -> int:
    """Fail running jobs whose runner stopped beating. With `store_owner` (a runner that holds the local store,
    which no other process can then be using) every running job of another runner is failed at once."""
    now = timezone.now()
    failed = 0
    for model in JOB_MODELS:
        running = model.objects.filter(status=JobStatus.RUNNING)
        if store_owner:
            running = running.exclude(runner=store_owner)
        else:
            running = running.filter(heartbeat_at__lt=now - ABANDONED_AFTER)
        for job in running:
            reason = f"abandoned: its runner {job.runner or '?'} stopped before finishing"
            failed += model.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
                status=JobStatus.FAILED, finished_at=now, error=reason, log=log_append(job.log, reason)
            )
            logger.warning("%s #%s %s", model.__name__, job.pk, reason)  # the class name: logs stay English
    return failed


def _running_exists() -> bool:
    return any(model.objects.filter(status=JobStatus.RUNNING).exists() for model in JOB_MODELS)


def _take(model: type[Job], pk: int, runner: str) -> Job | None:
    now = timezone.now()
    taken = model.objects.filter(pk=pk, status=JobStatus.PENDING).update(
        status=JobStatus.RUNNING, runner=runner, started_at=now, heartbeat_at=now, stage="starting"
    )
    return model.objects.get(pk=pk) if taken else None


@retry_locked
def job_claim_next(*, runner: str, store_owner: bool = False) -> Job | None:
    """Claim the oldest pending job of either kind for `runner`, unless a job is running anywhere."""
    with transaction.atomic():
        _serialize_claims()
        jobs_abandoned_fail(store_owner=runner if store_owner else "")
        if _running_exists():
            return None
        candidates: list[Job] = []
        for model in JOB_MODELS:
            pending = model.objects.filter(status=JobStatus.PENDING).order_by("created_at", "id")
            if connection.features.has_select_for_update_skip_locked:
                # PostgreSQL: a row another transaction is claiming is skipped rather than waited for
                pending = pending.select_for_update(skip_locked=True)
            first = pending.first()
            if first is not None:
                candidates.append(first)
        if not candidates:
            return None
        oldest = min(candidates, key=lambda job: job.created_at)
        return _take(type(oldest), oldest.pk, runner)


@retry_locked
def job_claim(*, job: Job, runner: str, store_owner: bool = False) -> bool:
    """Claim this pending job (a command running its own job in-process). False while another job runs or when
    the job is no longer pending."""
    with transaction.atomic():
        _serialize_claims()
        jobs_abandoned_fail(store_owner=runner if store_owner else "")
        if _running_exists():
            return False
        taken = _take(type(job), job.pk, runner)
    if taken is None:
        return False
    job.refresh_from_db()
    return True


# --- runners' heartbeats -------------------------------------------------------------------------------------


@retry_locked
def runner_heartbeat(*, runner: str, store: str = "", job: Job | None = None) -> None:
    now = timezone.now()
    updated = JobRunnerHeartbeat.objects.filter(runner=runner).update(seen_at=now, store=store)
    if not updated:
        JobRunnerHeartbeat.objects.update_or_create(
            runner=runner, defaults={"seen_at": now, "store": store, "started_at": now}
        )
    if job is not None:
        job_heartbeat(job=job)


@retry_locked
def job_heartbeat(*, job: Job) -> None:
    type(job).objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(heartbeat_at=timezone.now())


@retry_locked
def runner_forget(*, runner: str) -> None:
    JobRunnerHeartbeat.objects.filter(runner=runner).delete()


# --- progress, log and outcome of a running job --------------------------------------------------------------


def log_append(log: str, line: str) -> str:
    text = f"{log}{line.rstrip()}\n"
    if len(text) <= JOB_LOG_LIMIT:
        return text
    # keep the end: the newest lines say how the job ended
    marker = "[earlier lines dropped]\n"
    tail = text[-(JOB_LOG_LIMIT - len(marker)) :]
    return marker + tail[tail.find("\n") + 1 :]


def bounded(items: Sequence[Any]) -> list[Any]:
    return list(items[:_REPORT_LIST_LIMIT])


class JobTracker:
    """Progress, counts and log of one running job, written to its row at most a few times a second.

    Each write also reads `cancel_requested`, so a cancel from another process is seen within one interval;
    `stop` is this process's own way to stop the job (the runner shutting down, Ctrl-C in a command). Blocking:
    use it from the job's worker thread (`sync_to_async`/`to_thread` from async code).
    """

    def __init__(
        self,
        job: Job,
        *,
        stop: threading.Event | None = None,
        interval: float = 0.3,
    ) -> None:
        self.model = type(job)
        self.pk = job.pk
        self.stop = stop
        self.interval = interval
        self.fields: dict[str, Any] = {"stage": job.stage, "progress_done": 0, "progress_total": 0}
        self.log_text = job.log
        self._cancel = job.cancel_requested
        self._written = 0.0
        self._dirty = False

    # what the job reports

    def set(self, **fields: Any) -> None:
        self.fields.update(fields)
        self._dirty = True
        self.flush()

    def stage(self, name: str) -> None:
        self.set(stage=name)
        self.flush(force=True)

    def progress(self, done: int, total: int) -> None:
        self.set(progress_done=done, progress_total=total)

    def log(self, line: str) -> None:
        self.log_text = log_append(self.log_text, line)
        self._dirty = True
        self.flush()

    # cancel

    def cancelled(self, *, look: bool = False) -> bool:
        """Whether the job should stop; from the last write's reading unless `look` (then read now)."""
        self.flush(force=look)
        return self._cancel or (self.stop is not None and self.stop.is_set())

    def check(self) -> None:
        if self.cancelled():
            raise JobCancelled

    # writes

    def flush(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._written < self.interval:
            return
        self._written = now
        values = dict(self.fields, log=self.log_text, heartbeat_at=timezone.now())
        try:
            self.model.objects.filter(pk=self.pk, status=JobStatus.RUNNING).update(**values)
            self._dirty = False
            cancel = self.model.objects.filter(pk=self.pk).values_list("cancel_requested", flat=True).first()
        except OperationalError as exc:
            if not force:
                # progress is best effort: the next write carries it
                logger.debug("job progress not written (%s)", exc)
                return
            cancel = db_retry(self._read_cancel)
        self._cancel = bool(cancel)

    def _read_cancel(self) -> bool:
        return bool(self.model.objects.filter(pk=self.pk).values_list("cancel_requested", flat=True).first())

    def finish(self, status: str, *, error: str = "", **fields: Any) -> None:
        """The job's outcome, written with its last progress. Only a running job is finished (a row that an
        abandonment check already failed stays failed)."""
        self.fields.update(fields)
        if error:
            self.log_text = log_append(self.log_text, f"{status}: {error}")
        values = dict(
            self.fields, log=self.log_text, status=status, error=error[:1000], finished_at=timezone.now(), stage=""
        )
        values["heartbeat_at"] = values["finished_at"]
        db_retry(self.model.objects.filter(pk=self.pk, status=JobStatus.RUNNING).update, **values)


# --- sources ---------------------------------------------------------------------------------------------------


class SourceInvalid(ValueError):
    """A source that cannot be added as asked; the message says which field and why."""


_WEB_KINDS = frozenset({SourceKind.WEBSITE, SourceKind.SITEMAP})


def _http_url(value: str, field: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceInvalid(f"{field}: {value!r} is not an http(s) URL")
    return value.strip()


@retry_locked
def source_create(
    *,
    name: str,
    kind: str,
    url: str = "",
    folder: str = "",
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    max_pages: int = 1000,
    every: timedelta | None = None,
    base_url: str = "",
    internal: bool = False,
    rate: float = 2.0,
    concurrency: int = 2,
) -> Source:
    """A new source, checked; with `every`, its first sync is due at once (the job runner queues it)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,99}", name or ""):
        raise SourceInvalid(f"name: {name!r} must be lower-case letters, digits, '-' or '_' (at most 100)")
    if kind not in SourceKind.values:
        raise SourceInvalid(f"kind: {kind!r} is not one of {', '.join(SourceKind.values)}")
    if kind in _WEB_KINDS:
        url = _http_url(url, "url")
    elif kind == SourceKind.FOLDER:
        if not folder or not Path(folder).is_dir():
            raise SourceInvalid(f"folder: {folder!r} is not a folder")
        folder = str(Path(folder).resolve())
    elif kind == SourceKind.UPLOADS:
        if Source.objects.filter(kind=SourceKind.UPLOADS).exists():
            raise SourceInvalid("kind: there is an uploads source already (one holds every upload)")
        folder = str(uploads_dir().resolve())
    if base_url:
        base_url = _http_url(base_url, "base_url")
    if max_pages < 1:
        raise SourceInvalid("max_pages must be at least 1")
    if not 0 < rate <= 100:
        raise SourceInvalid("rate must be above 0 and at most 100 requests per second")
    if every is not None and every < timedelta(minutes=1):
        raise SourceInvalid("every must be at least one minute")
    if Source.objects.filter(name=name).exists():
        raise SourceInvalid(f"name: a source named {name!r} exists already")
    return Source.objects.create(
        name=name,
        kind=kind,
        url=url,
        folder=folder,
        include=list(include),
        exclude=list(exclude),
        max_pages=max_pages,
        every=every,
        base_url=base_url,
        internal=internal,
        rate=rate,
        concurrency=max(1, min(concurrency, 16)),
        next_sync_at=timezone.now() if every is not None else None,
    )


def _source_active_job(source: Source) -> IndexJob | None:
    return (
        IndexJob.objects.filter(source=source, status__in=(JobStatus.PENDING, JobStatus.RUNNING))
        .order_by("created_at")
        .first()
    )


@retry_locked
def source_sync_request(
    *, source: Source, full: bool = False, remove: bool = False, created_by: Any = None, created_from: str = ""
) -> IndexJob:
    """The index job that syncs (or, with `remove`, removes) `source`: an existing pending or running one is
    returned rather than a second queued, so a source is synced one job at a time however many ask."""
    with transaction.atomic():
        _serialize_claims()
        active = _source_active_job(source)
        if active is not None and not (remove and not active.remove_source):
            return active
        folder_kinds = (SourceKind.FOLDER, SourceKind.UPLOADS)
        paths = [source.folder] if source.kind in folder_kinds and source.folder else []
        job = IndexJob.objects.create(
            source=source,
            source_name=source.name,
            remove_source=remove,
            paths=paths,
            full=full,
            created_by=created_by if getattr(created_by, "pk", None) else None,
            created_from=created_from,
        )
        Source.objects.filter(pk=source.pk).update(last_job=job)
    return job


@retry_locked
def sources_due_enqueue(*, now: datetime | None = None) -> list[IndexJob]:
    """Queue a sync for every scheduled source whose time has come (the job runner calls this as it polls). The
    schedule is the row's `next_sync_at`, moved on with a compare-and-set, so it survives restarts and two
    runners never queue the same sync twice."""
    now = now or timezone.now()
    jobs: list[IndexJob] = []
    due = Source.objects.filter(paused=False, every__isnull=False, next_sync_at__lte=now)
    for source in due:
        assert source.every is not None
        moved = Source.objects.filter(pk=source.pk, next_sync_at=source.next_sync_at).update(
            next_sync_at=now + source.every
        )
        if moved:
            jobs.append(source_sync_request(source=source, created_from="schedule"))
    return jobs


@retry_locked
def source_pause(*, source: Source, paused: bool) -> None:
    next_sync = None if paused or source.every is None else timezone.now()
    Source.objects.filter(pk=source.pk).update(paused=paused, next_sync_at=next_sync)


# --- links ---------------------------------------------------------------------------------------------------


class LinkInvalid(ValueError):
    """A link that is not an absolute http(s) URL."""


@retry_locked
def uploads_source_base_url_set(*, base_url: str) -> tuple[Source | None, bool]:
    """Set the base URL uploads link to (base + the file's path in the uploads folder), creating the uploads
    source when there is none; returns (the source, whether the base URL changed). "" leaves uploads unlinked."""
    base_url = (base_url or "").strip()
    if base_url and not http_link(base_url):
        raise LinkInvalid(f"{base_url!r} is not an http(s) URL")
    with transaction.atomic():
        source = Source.objects.select_for_update().filter(kind=SourceKind.UPLOADS).first()
        if source is None:
            if not base_url:
                return None, False
            taken = Source.objects.filter(name="uploads").exists()
            name = f"uploads-{uuid.uuid4().hex[:6]}" if taken else "uploads"
            created = Source.objects.create(
                name=name, kind=SourceKind.UPLOADS, folder=str(uploads_dir().resolve()), base_url=base_url
            )
            return created, True
        if source.base_url == base_url:
            return source, False
        source.base_url = base_url
        source.save(update_fields=["base_url"])
        return source, True


def uploads_job_create(
    *, saved: Sequence[Path], relink: bool = False, created_by: Any = None, created_from: str = ""
) -> IndexJob:
    """The index job for a saved batch of uploads: its files, or with `relink` (the uploads' base URL changed, so
    every upload's link moves) the whole uploads folder."""
    paths = [uploads_dir().resolve()] if relink else list(saved)
    return index_job_create(paths=paths, created_by=created_by, created_from=created_from)


def document_link_set(*, document: Document, url: str, created_by: Any = None) -> IndexJob | None:
    """Set (or, with "", clear) the link staff chose for `document`, and queue the job that writes it into the
    index: the sync of the website or folder source holding the document, else a reindex of its file. None when
    nothing can re-read the document now (the link then applies the next time it is indexed)."""
    url = (url or "").strip()
    if url and not http_link(url):
        raise LinkInvalid(f"{url!r} is not an http(s) URL")
    fields: dict[str, Any] = {"url_override": url, "updated_at": timezone.now()}
    if url:
        fields["url"] = url
    db_retry(Document.objects.filter(pk=document.pk).update, **fields)
    document.refresh_from_db()
    source = _source_holding(document)
    if source is not None:
        if source.kind in _WEB_KINDS:
            # asked for in full next time: a 304 would keep the page's old link
            db_retry(SourcePage.objects.filter(source=source, doc_id=document.doc_id).update, etag="", last_modified="")
        return source_sync_request(source=source, created_by=created_by, created_from="admin")
    try:
        path = path_allowed(document.source)
    except PathNotAllowed:
        return None
    return index_job_create(paths=[path], created_by=created_by, created_from="admin")


def _source_holding(document: Document) -> Source | None:
    parts = document.doc_id.split("/")
    if len(parts) > 2 and parts[0] == WEB_PREFIX:
        return Source.objects.filter(name=parts[1], kind__in=_WEB_KINDS).first()
    if not document.source or "://" in document.source:
        return None
    path = Path(document.source)
    for source in Source.objects.filter(kind=SourceKind.FOLDER):
        if source.folder and path.is_relative_to(Path(source.folder)):
            return source
    return None


# --- upload batches --------------------------------------------------------------------------------------------

MAX_UPLOAD_PATH_CHARS = 300
MAX_UPLOAD_PART_CHARS = 120
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class UploadItem:
    """One uploaded file: its name as sent, the relative path inside a folder upload ("" for a plain file), and
    its content in pieces."""

    name: str
    relative_path: str
    chunks: Iterable[bytes]


@dataclass(frozen=True, slots=True)
class UploadOutcome:
    path: str  # relative to the uploads folder ("en/fees.html"), or the name as sent when it was refused
    outcome: str  # "added", "updated" or "refused"
    reason: str = ""


@dataclass(slots=True)
class UploadBatch:
    outcomes: list[UploadOutcome] = field(default_factory=list)
    saved: list[Path] = field(default_factory=list)

    @property
    def refused(self) -> list[UploadOutcome]:
        return [o for o in self.outcomes if o.outcome == "refused"]


def upload_relative_path(raw: str) -> str:
    """A safe path inside the uploads folder for an uploaded file's (relative) name, or UploadRefused naming why:
    no absolute path, no `..`, no control characters, no hidden parts, bounded lengths, a known extension."""
    if not raw or not raw.strip():
        raise UploadRefused("an empty file name")
    if _CONTROL_RE.search(raw):
        raise UploadRefused(f"{raw!r}: control characters in the name")
    text = raw.replace("\\", "/").strip()
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise UploadRefused(f"{raw!r}: an absolute path")
    parts = [part.strip() for part in text.split("/") if part.strip() not in ("", ".")]
    if not parts:
        raise UploadRefused(f"{raw!r} is not a usable file name")
    if any(part == ".." for part in parts):
        raise UploadRefused(f"{raw!r}: '..' in the path")
    if any(part.startswith(".") for part in parts):
        raise UploadRefused(f"{raw!r}: a hidden file or folder (its name starts with '.')")
    if any(len(part) > MAX_UPLOAD_PART_CHARS for part in parts) or len("/".join(parts)) > MAX_UPLOAD_PATH_CHARS:
        raise UploadRefused(
            f"{raw[:60]!r}...: names are at most {MAX_UPLOAD_PART_CHARS} characters a folder or file and "
            f"{MAX_UPLOAD_PATH_CHARS} in all"
        )
    suffix = Path(parts[-1]).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES or not Path(parts[-1]).stem:
        raise UploadRefused(f"{raw}: only {', '.join(sorted(UPLOAD_SUFFIXES))} files can be indexed")
    return "/".join(parts)


def _upload_check(relative: str, partial: Path) -> str:
    """Why a written upload cannot be indexed ("" when it can): the loaders read it as the index job will."""
    fmt = format_of(relative)
    reason = screen_file(partial, fmt)
    if reason:
        return reason
    errors: list[Any] = []
    try:
        from rag.retrieval.loaders import load_file  # optional package (see rag.documents.sources)
    except ImportError:
        return ""
    documents = load_file(partial, doc_id=relative, format=fmt, errors=errors)
    if not documents:
        return str(getattr(errors[0], "reason", errors[0])) if errors else "no document in the file"
    return ""


def uploads_save(*, items: Sequence[UploadItem], max_bytes: int = MAX_UPLOAD_BYTES) -> UploadBatch:
    """Save a batch of uploads, all or nothing: every file's path is checked and every file written aside and
    read as the index job will read it before any is put in place; one refused file leaves the uploads folder as
    it was, and the batch says which file and why. A path that exists already is an update."""
    folder = uploads_dir()
    folder.mkdir(parents=True, exist_ok=True)
    batch = UploadBatch()
    staged: list[tuple[str, Path]] = []
    seen: set[str] = set()
    try:
        for item in items:
            try:
                relative = upload_relative_path(item.relative_path or item.name)
                if relative.lower() in seen:
                    raise UploadRefused(f"{relative}: the batch holds this path twice")
                seen.add(relative.lower())
                partial = folder / f".upload-{uuid.uuid4().hex}.part"
                staged.append((relative, partial))
                _write_bounded(partial, item.chunks, max_bytes=max_bytes, name=relative)
                reason = _upload_check(relative, partial)
                if reason:
                    raise UploadRefused(reason)
            except UploadRefused as exc:
                batch.outcomes.append(UploadOutcome(item.relative_path or item.name, "refused", str(exc)))
                continue
            exists = (folder / relative).exists()
            batch.outcomes.append(UploadOutcome(relative, "updated" if exists else "added"))
        if batch.refused:
            return batch
        for relative, partial in staged:
            target = (folder / relative).resolve()
            if not target.is_relative_to(folder.resolve()):  # a symbolic link inside the folder pointing out
                raise UploadRefused(f"{relative}: outside the uploads folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial.replace(target)
            batch.saved.append(target)
        return batch
    finally:
        for _, partial in staged:
            partial.unlink(missing_ok=True)


def _write_bounded(partial: Path, chunks: Iterable[bytes], *, max_bytes: int, name: str) -> None:
    size = 0
    with partial.open("wb") as handle:
        for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise UploadRefused(f"{name}: larger than {max_bytes // (1024 * 1024)} MB")
            handle.write(chunk)
