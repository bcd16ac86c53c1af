"""Curated answers: answers staff approved for a question, served before anything is generated or cached."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

LANGUAGES = (("zh-hant", _("Traditional Chinese")), ("zh-hans", _("Simplified Chinese")), ("en", _("English")))


class CuratedAnswer(models.Model):
    """One language's variant of an approved answer. Variants of the same answer share a `topic`: a question that
    matches any of them is answered in the asker's language when that variant exists."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    topic = models.UUIDField(
        _("topic"), default=uuid.uuid4, db_index=True, help_text=_("Variants of one answer in other languages.")
    )
    language = models.CharField(_("language"), max_length=16, choices=LANGUAGES, default="zh-hant")
    question = models.TextField(_("question"))
    answer = models.TextField(_("answer"))
    source_url = models.URLField(_("source link"), max_length=500, blank=True)
    source_title = models.CharField(_("source title"), max_length=300, blank=True)
    active = models.BooleanField(_("active"), default=True)
    hits = models.PositiveIntegerField(_("hits"), default=0)
    last_hit_at = models.DateTimeField(_("last hit at"), null=True, blank=True)
    # the logged answer it was approved from, when it was taken from one
    from_request_id = models.CharField(_("taken from request"), max_length=64, blank=True)
    approved_by = models.CharField(_("approved by"), max_length=150, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("curated answer")
        verbose_name_plural = _("curated answers")
        ordering = ["-updated_at"]
        constraints = [models.UniqueConstraint(fields=["topic", "language"], name="curated_one_variant_per_language")]

    def __str__(self) -> str:
        return f"[{self.language}] {self.question[:80]}"
