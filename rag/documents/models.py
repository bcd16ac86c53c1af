"""Documents in the search index, their chunks, and the index/backfill jobs that change them.

The vector store holds what is searched; these rows are the bookkeeping staff see and jobs compare against. A
job is a row so that any process can ask for one and whoever owns the store (the server, or a command when no
server runs) executes it: see rag.documents.runner and the reindex/backfill commands.
"""

from __future__ import annotations

from typing import ClassVar, Self

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

# the job log is for people: the last this many characters are kept, older lines are dropped
JOB_LOG_LIMIT = 20_000
TEXT_PREVIEW_CHARS = 300


class DocumentStatus(models.TextChoices):
    INDEXED = "indexed", _("indexed")
    # the last job could not read its source (the reason is in status_detail); the previous version stays indexed
    STALE = "stale", _("stale (source unreadable, previous version indexed)")
    DELETED = "deleted", pgettext_lazy("document status", "deleted")  # a state, not the count of deleted ones


class Document(models.Model):
    doc_id = models.CharField(_("doc id"), max_length=500, unique=True)
    source = models.CharField(
        _("source"), max_length=1000, blank=True, help_text=_("the file (or URI) the document was read from")
    )
    source_format = models.CharField(_("source format"), max_length=16, blank=True)
    title = models.CharField(_("title"), max_length=500)
    url = models.CharField(_("url"), max_length=1000, blank=True)
    # the link staff set in the admin; it wins over the source's own link on every later index or sync
    url_override = models.CharField(_("link set by staff"), max_length=1000, blank=True)
    language = models.CharField(_("language"), max_length=16, db_index=True)
    tags = models.JSONField(_("tags"), default=list, blank=True)
    kind = models.CharField(_("kind"), max_length=16, default="article", db_index=True)
    form_id = models.CharField(_("form id"), max_length=100, blank=True)
    form_file = models.CharField(
        _("form file"), max_length=500, blank=True, help_text=_("the attachment a form document offers")
    )
    content_hash = models.CharField(_("content hash"), max_length=64, blank=True)
    chunk_count = models.PositiveIntegerField(_("chunk count"), default=0)
    status = models.CharField(
        _("status"), max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.INDEXED, db_index=True
    )
    status_detail = models.CharField(_("status detail"), max_length=500, blank=True)
    indexed_at = models.DateTimeField(_("indexed at"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    last_job = models.ForeignKey(
        "IndexJob", verbose_name=_("last job"), null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        verbose_name = _("document")
        verbose_name_plural = _("documents")
        ordering = ("doc_id",)

    def __str__(self) -> str:
        return self.doc_id


class Chunk(models.Model):
    document = models.ForeignKey(Document, verbose_name=_("document"), on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField(_("ordinal"))
    chunk_id = models.CharField(_("chunk id"), max_length=600, unique=True)
    point_id = models.CharField(_("point id"), max_length=36, help_text=_("the point's id in the vector store"))
    heading = models.CharField(_("heading"), max_length=1000, blank=True)
    text_preview = models.TextField(_("text preview"), blank=True)
    description_zh = models.TextField(_("description zh"), blank=True)
    description_en = models.TextField(_("description en"), blank=True)
    described_at = models.DateTimeField(_("described at"), null=True, blank=True, db_index=True)

    class Meta:
        verbose_name = _("chunk")
        verbose_name_plural = _("chunks")
        ordering = ("document", "ordinal")
        constraints = [models.UniqueConstraint(fields=("document", "ordinal"), name="rag_documents_chunk_ordinal")]

    def __str__(self) -> str:
        return self.chunk_id


class JobStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


FINISHED_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Job(models.Model):
    """What index and backfill jobs share: life cycle, progress, counts, log."""

    status = models.CharField(
        _("status"), max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING, db_index=True
    )
    stage = models.CharField(_("stage"), max_length=32, blank=True, help_text=_("what the job is doing now"))
    progress_done = models.PositiveIntegerField(_("progress done"), default=0)
    progress_total = models.PositiveIntegerField(_("progress total"), default=0)
    added = models.PositiveIntegerField(_("added"), default=0)
    updated = models.PositiveIntegerField(_("updated"), default=0)
    unchanged = models.PositiveIntegerField(_("unchanged"), default=0)
    deleted = models.PositiveIntegerField(_("deleted"), default=0)
    skipped = models.PositiveIntegerField(_("skipped"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    # details for the summary (skip reasons, doc ids per outcome), bounded by the service that writes it
    report = models.JSONField(_("report"), default=dict, blank=True)
    error = models.CharField(_("error"), max_length=1000, blank=True)
    log = models.TextField(_("log"), blank=True)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_from = models.CharField(_("created from"), max_length=32, blank=True, help_text=_("command, api or admin"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    runner = models.CharField(
        _("runner"), max_length=200, blank=True, help_text=_("hostname:pid of the process running it")
    )
    # refreshed while running: a running job whose heartbeat stops was abandoned by a dead process
    heartbeat_at = models.DateTimeField(_("heartbeat at"), null=True, blank=True)

    # Declared for the type checker alone: an abstract model has no manager, but code that handles either kind of
    # job through `type[Job]` reaches the concrete model's `objects`.
    objects: ClassVar[models.Manager[Self]]

    class Meta:
        abstract = True
        ordering = ("-created_at", "-id")

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def percent(self) -> int:
        if self.progress_total <= 0:
            return 100 if self.status == JobStatus.SUCCEEDED else 0
        return min(100, round(100 * self.progress_done / self.progress_total))

    @property
    def seconds(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at or self.heartbeat_at or self.started_at
        return max(0.0, (end - self.started_at).total_seconds())


class IndexFormat(models.TextChoices):
    AUTO = "auto", _("auto (by file extension)")
    MARKDOWN = "markdown", "Markdown"
    TEXT = "text", _("plain text")
    HTML = "html", "HTML"
    PDF = "pdf", "PDF"
    SQUAD = "squad", "SQuAD JSON"
    DOCX = "docx", "Word (.docx)"
    XLSX = "xlsx", "Excel (.xlsx)"
    PPTX = "pptx", "PowerPoint (.pptx)"


class SourceKind(models.TextChoices):
    WEBSITE = "website", _("website (start URL)")
    SITEMAP = "sitemap", _("website (sitemap)")
    FOLDER = "folder", _("server folder")
    UPLOADS = "uploads", _("uploads")


class Source(models.Model):
    """Where an organisation's content lives and how it is kept in step: a website crawled from a start URL or a
    sitemap, or a folder on the server. A sync is an index job with `source` set (rag.documents.source_sync)."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    kind = models.CharField(_("kind"), max_length=16, choices=SourceKind.choices)
    url = models.CharField(_("URL"), max_length=1000, blank=True, help_text=_("the start URL or the sitemap URL"))
    folder = models.CharField(_("folder"), max_length=1000, blank=True)
    include = models.JSONField(_("include"), default=list, blank=True, help_text=_("URL path or file globs to keep"))
    exclude = models.JSONField(
        _("exclude"), default=list, blank=True, help_text=_("URL path or file globs to leave out")
    )
    max_pages = models.PositiveIntegerField(_("page limit"), default=1000)
    every = models.DurationField(_("sync every"), null=True, blank=True, help_text=_("empty: only when asked"))
    base_url = models.CharField(
        _("base URL"), max_length=1000, blank=True, help_text=_("links of folder documents: this + the relative path")
    )
    internal = models.BooleanField(
        _("internal"), default=False, help_text=_("may reach private, loopback and link-local addresses")
    )
    rate = models.FloatField(_("requests per second"), default=2.0)
    concurrency = models.PositiveSmallIntegerField(_("concurrency"), default=2)
    paused = models.BooleanField(_("paused"), default=False)
    last_sync_at = models.DateTimeField(_("last sync"), null=True, blank=True)
    next_sync_at = models.DateTimeField(_("next sync"), null=True, blank=True, db_index=True)
    last_job = models.ForeignKey(
        "IndexJob", verbose_name=_("last job"), null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("source")
        verbose_name_plural = _("sources")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class SourcePage(models.Model):
    """One URL of a website source as the last sync saw it: what a conditional GET sends next time, the page's
    content hash, and how many syncs in a row it answered 404/410."""

    source = models.ForeignKey(Source, verbose_name=_("source"), on_delete=models.CASCADE, related_name="pages")
    url = models.CharField(_("URL"), max_length=2000)
    doc_id = models.CharField(_("doc id"), max_length=500, blank=True)
    etag = models.CharField(_("ETag"), max_length=500, blank=True)
    last_modified = models.CharField(_("Last-Modified"), max_length=100, blank=True)
    content_hash = models.CharField(_("content hash"), max_length=64, blank=True)
    status_code = models.PositiveSmallIntegerField(_("HTTP status"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=32, blank=True)
    detail = models.CharField(_("detail"), max_length=500, blank=True)
    gone_count = models.PositiveSmallIntegerField(_("syncs answered 404/410"), default=0)
    fetched_at = models.DateTimeField(_("fetched at"), null=True, blank=True)

    class Meta:
        verbose_name = _("source page")
        verbose_name_plural = _("source pages")
        ordering = ("source", "url")
        constraints = [models.UniqueConstraint(fields=("source", "url"), name="rag_documents_sourcepage_url")]

    def __str__(self) -> str:
        return self.url


class IndexJob(Job):
    source = models.ForeignKey(
        Source, verbose_name=_("source"), null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    source_name = models.CharField(_("source name"), max_length=100, blank=True, db_index=True)
    remove_source = models.BooleanField(
        _("remove source"), default=False, help_text=_("drop every document of the source, then the source")
    )
    paths = models.JSONField(
        _("paths"), default=list, blank=True, help_text=_("files or folders; empty means CORPUS_DIR")
    )
    format = models.CharField(_("format"), max_length=16, choices=IndexFormat.choices, default=IndexFormat.AUTO)
    full = models.BooleanField(_("full"), default=False, help_text=_("re-embed every document, changed or not"))
    if_empty = models.BooleanField(
        _("if empty"), default=False, help_text=_("do nothing when the live index already has chunks")
    )
    chunks = models.PositiveIntegerField(_("chunks"), default=0, help_text=_("chunks in the index after the job"))
    chunks_embedded = models.PositiveIntegerField(_("chunks embedded"), default=0)
    collection = models.CharField(
        _("collection"), max_length=200, blank=True, help_text=_("the build this job published")
    )

    class Meta(Job.Meta):
        verbose_name = _("index job")
        verbose_name_plural = _("index jobs")

    def __str__(self) -> str:
        return f"index job #{self.pk}"


class BackfillJob(Job):
    limit = models.PositiveIntegerField(
        _("limit"), null=True, blank=True, help_text=_("describe at most this many chunks")
    )

    class Meta(Job.Meta):
        verbose_name = _("backfill job")
        verbose_name_plural = _("backfill jobs")

    def __str__(self) -> str:
        return f"backfill job #{self.pk}"


class JobRunnerHeartbeat(models.Model):
    """One row per process running a job runner, refreshed every few seconds.

    A command that finds the store locked reads these rows to know whether someone will run the job it creates
    (instead of waiting forever for a server that runs no runner).
    """

    runner = models.CharField(_("runner"), max_length=200, unique=True)
    store = models.CharField(_("store"), max_length=1000, blank=True, help_text=_("where the runner's vector store is"))
    started_at = models.DateTimeField(_("started at"))
    seen_at = models.DateTimeField(_("seen at"), db_index=True)

    class Meta:
        verbose_name = _("job runner heartbeat")
        verbose_name_plural = _("job runner heartbeats")

    def __str__(self) -> str:
        return self.runner
