"""Semantic cache entries: the record staff see and delete, and (without a Qdrant server) the vectors every worker's
in-memory copy is loaded from (see rag.semcache.index and rag.semcache.db_index)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class CacheEntry(models.Model):
    # A UUID so the row and its Qdrant point share one id, known before either is written; an auto-increment id
    # would be reused after a database reset while the old point still sits in the collection.
    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    question = models.TextField(
        _("question"), help_text=_("The question as it was first asked (after language normalisation).")
    )
    normalized_question = models.TextField(
        _("normalized question"), help_text=_("The key it is looked up and compared by.")
    )
    answer = models.TextField(_("answer"))
    language = models.CharField(_("language"), max_length=16)
    sources = models.JSONField(
        _("sources"), default=list, blank=True, help_text=_("The answer's sources, as streamed with it.")
    )
    doc_ids = models.JSONField(_("doc ids"), default=list, blank=True, help_text=_("Documents the answer cites."))
    index_version = models.CharField(
        _("index version"), max_length=200, help_text=_("The search index build the answer came from.")
    )
    prompt_version = models.CharField(
        _("prompt version"), max_length=200, help_text=_("The answer prompt's version ('offline' without LLM).")
    )
    producer = models.CharField(
        _("producer"),
        max_length=300,
        blank=True,
        default="",
        help_text=_("What wrote the answer: backend, model (or 'offline') and workflow version."),
    )
    index_generation = models.PositiveIntegerField(
        _("index generation"),
        default=0,
        help_text=_("The generation of the index build the answer was retrieved from."),
    )
    vector = models.BinaryField(
        _("vector"),
        null=True,
        editable=False,
        help_text=_("The question's embedding (float32), when the database holds vectors."),
    )
    revision = models.PositiveBigIntegerField(
        _("revision"),
        default=0,
        db_index=True,
        help_text=_("The cache revision that added it (workers' copies load newer ones)."),
    )
    hits = models.PositiveIntegerField(_("hits"), default=0)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    expires_at = models.DateTimeField(_("expires at"), db_index=True)
    last_hit_at = models.DateTimeField(_("last hit at"), null=True, blank=True)

    class Meta:
        verbose_name = _("semantic cache entry")
        verbose_name_plural = _("semantic cache entries")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["language", "index_version", "prompt_version"], name="semcache_scope_idx")]

    def __str__(self) -> str:
        return f"{self.question[:60]} ({self.language})"


class CacheEntryDocument(models.Model):
    """One document an entry cites: invalidation looks entries up by document (JSON containment is not portable)."""

    entry = models.ForeignKey(CacheEntry, verbose_name=_("entry"), on_delete=models.CASCADE, related_name="documents")
    doc_id = models.CharField(_("doc id"), max_length=255, db_index=True)

    class Meta:
        verbose_name = _("cache entry document")
        verbose_name_plural = _("cache entry documents")
        constraints = [models.UniqueConstraint(fields=["entry", "doc_id"], name="semcache_entry_doc_unique")]

    def __str__(self) -> str:
        return self.doc_id
