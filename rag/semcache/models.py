"""Semantic cache entries: the record staff see and delete, and (without a Qdrant server) the vectors every worker's
in-memory copy is loaded from (see rag.semcache.index and rag.semcache.db_index)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone


class CacheEntry(models.Model):
    # A UUID so the row and its Qdrant point share one id, known before either is written; an auto-increment id
    # would be reused after a database reset while the old point still sits in the collection.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    question = models.TextField(help_text="The question as it was first asked (after language normalisation).")
    normalized_question = models.TextField(help_text="The key it is looked up and compared by.")
    answer = models.TextField()
    language = models.CharField(max_length=16)
    sources = models.JSONField(default=list, blank=True, help_text="The answer's sources, as streamed with it.")
    doc_ids = models.JSONField(default=list, blank=True, help_text="Documents the answer cites.")
    index_version = models.CharField(max_length=200, help_text="The search index build the answer came from.")
    prompt_version = models.CharField(max_length=200, help_text="The answer prompt's version ('offline' without LLM).")
    producer = models.CharField(
        max_length=300,
        blank=True,
        default="",
        help_text="What wrote the answer: backend, model (or 'offline') and workflow version.",
    )
    index_generation = models.PositiveIntegerField(
        default=0, help_text="The generation of the index build the answer was retrieved from."
    )
    vector = models.BinaryField(
        null=True, editable=False, help_text="The question's embedding (float32), when the database holds vectors."
    )
    revision = models.PositiveBigIntegerField(
        default=0, db_index=True, help_text="The cache revision that added it (workers' copies load newer ones)."
    )
    hits = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)
    last_hit_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "semantic cache entry"
        verbose_name_plural = "semantic cache entries"
        indexes = [models.Index(fields=["language", "index_version", "prompt_version"], name="semcache_scope_idx")]

    def __str__(self) -> str:
        return f"{self.question[:60]} ({self.language})"


class CacheEntryDocument(models.Model):
    """One document an entry cites: invalidation looks entries up by document (JSON containment is not portable)."""

    entry = models.ForeignKey(CacheEntry, on_delete=models.CASCADE, related_name="documents")
    doc_id = models.CharField(max_length=255, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["entry", "doc_id"], name="semcache_entry_doc_unique")]

    def __str__(self) -> str:
        return self.doc_id
