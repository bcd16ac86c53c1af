"""Documents in the search index, their chunks, and the index/backfill jobs that change them.

The vector store holds what is searched; these rows are the bookkeeping staff see and jobs compare against. A
job is a row so that any process can ask for one and whoever owns the store (the server, or a command when no
server runs) executes it: see rag.documents.runner and the reindex/backfill commands.
"""

from __future__ import annotations

from typing import ClassVar, Self

from django.conf import settings
from django.db import models

# the job log is for people: the last this many characters are kept, older lines are dropped
JOB_LOG_LIMIT = 20_000
TEXT_PREVIEW_CHARS = 300


class DocumentStatus(models.TextChoices):
    INDEXED = "indexed", "indexed"
    # the last job could not read its source (the reason is in status_detail); the previous version stays indexed
    STALE = "stale", "stale (source unreadable, previous version indexed)"
    DELETED = "deleted", "deleted"


class Document(models.Model):
    doc_id = models.CharField(max_length=500, unique=True)
    source = models.CharField(max_length=1000, blank=True, help_text="the file (or URI) the document was read from")
    source_format = models.CharField(max_length=16, blank=True)
    title = models.CharField(max_length=500)
    url = models.CharField(max_length=1000, blank=True)
    language = models.CharField(max_length=16, db_index=True)
    tags = models.JSONField(default=list, blank=True)
    kind = models.CharField(max_length=16, default="article", db_index=True)
    form_id = models.CharField(max_length=100, blank=True)
    form_file = models.CharField(max_length=500, blank=True, help_text="the attachment a form document offers")
    content_hash = models.CharField(max_length=64, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.INDEXED, db_index=True
    )
    status_detail = models.CharField(max_length=500, blank=True)
    indexed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_job = models.ForeignKey("IndexJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ("doc_id",)

    def __str__(self) -> str:
        return self.doc_id


class Chunk(models.Model):
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    chunk_id = models.CharField(max_length=600, unique=True)
    point_id = models.CharField(max_length=36, help_text="the point's id in the vector store")
    heading = models.CharField(max_length=1000, blank=True)
    text_preview = models.TextField(blank=True)
    description_zh = models.TextField(blank=True)
    description_en = models.TextField(blank=True)
    described_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ("document", "ordinal")
        constraints = [models.UniqueConstraint(fields=("document", "ordinal"), name="rag_documents_chunk_ordinal")]

    def __str__(self) -> str:
        return self.chunk_id


class JobStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


FINISHED_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Job(models.Model):
    """What index and backfill jobs share: life cycle, progress, counts, log."""

    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING, db_index=True)
    stage = models.CharField(max_length=32, blank=True, help_text="what the job is doing now")
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    added = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    deleted = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    # details for the summary (skip reasons, doc ids per outcome), bounded by the service that writes it
    report = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=1000, blank=True)
    log = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_from = models.CharField(max_length=32, blank=True, help_text="command, api or admin")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    runner = models.CharField(max_length=200, blank=True, help_text="hostname:pid of the process running it")
    # refreshed while running: a running job whose heartbeat stops was abandoned by a dead process
    heartbeat_at = models.DateTimeField(null=True, blank=True)

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
    AUTO = "auto", "auto (by file extension)"
    MARKDOWN = "markdown", "Markdown"
    TEXT = "text", "plain text"
    HTML = "html", "HTML"
    PDF = "pdf", "PDF"
    SQUAD = "squad", "SQuAD JSON"


class IndexJob(Job):
    paths = models.JSONField(default=list, blank=True, help_text="files or folders; empty means CORPUS_DIR")
    format = models.CharField(max_length=16, choices=IndexFormat.choices, default=IndexFormat.AUTO)
    full = models.BooleanField(default=False, help_text="re-embed every document, changed or not")
    if_empty = models.BooleanField(default=False, help_text="do nothing when the live index already has chunks")
    chunks = models.PositiveIntegerField(default=0, help_text="chunks in the index after the job")
    chunks_embedded = models.PositiveIntegerField(default=0)
    collection = models.CharField(max_length=200, blank=True, help_text="the build this job published")

    class Meta(Job.Meta):
        verbose_name = "index job"

    def __str__(self) -> str:
        return f"index job #{self.pk}"


class BackfillJob(Job):
    limit = models.PositiveIntegerField(null=True, blank=True, help_text="describe at most this many chunks")

    class Meta(Job.Meta):
        verbose_name = "backfill job"

    def __str__(self) -> str:
        return f"backfill job #{self.pk}"


class JobRunnerHeartbeat(models.Model):
    """One row per process running a job runner, refreshed every few seconds.

    A command that finds the store locked reads these rows to know whether someone will run the job it creates
    (instead of waiting forever for a server that runs no runner).
    """

    runner = models.CharField(max_length=200, unique=True)
    store = models.CharField(max_length=1000, blank=True, help_text="where the runner's vector store is")
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.runner
