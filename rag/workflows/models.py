"""Workflow drafts edited in the graph builder, and the archive of every saved version.

A draft's `graph` is the engine's JSON shape (`WorkflowDefinition.to_dict()`), plus an optional `layout` key with
the canvas positions, which the engine ignores. Publishing copies the saved graph into `published_graph`, so
editing a published draft never changes what serves traffic until it is published again.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

BACKEND_CHOICES = [("chat", "chat"), ("responses", "responses")]


class WorkflowDraft(models.Model):
    name = models.CharField(_("name"), max_length=100, unique=True)
    graph = models.JSONField(_("graph"), default=dict)
    version = models.PositiveIntegerField(_("version"), default=1)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("author"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # The engine's validator on the saved graph: a list of {"code", "message", "node"}.
    problems = models.JSONField(_("problems"), default=list, blank=True)
    valid = models.BooleanField(_("valid"), default=False)
    published = models.BooleanField(_("published"), default=False)
    backend = models.CharField(
        _("backend"),
        max_length=16,
        choices=BACKEND_CHOICES,
        blank=True,
        default="",
        help_text=_("The backend it serves when published"),
    )
    published_version = models.PositiveIntegerField(_("published version"), null=True, blank=True)
    published_graph = models.JSONField(_("published graph"), null=True, blank=True)
    published_at = models.DateTimeField(_("published at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("workflow draft")
        verbose_name_plural = _("workflow drafts")
        ordering = ["name"]
        constraints = [
            # The database, not only the service, keeps one live workflow per backend.
            models.UniqueConstraint(
                fields=["backend"], condition=Q(published=True), name="rag_workflows_one_published_per_backend"
            ),
            models.CheckConstraint(
                condition=Q(published=False) | ~Q(backend=""), name="rag_workflows_published_has_backend"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class WorkflowDraftVersion(models.Model):
    """One saved state of a draft, kept so versions can be compared and restored exactly."""

    draft = models.ForeignKey(WorkflowDraft, verbose_name=_("draft"), on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField(_("version"))
    graph = models.JSONField(_("graph"))
    valid = models.BooleanField(_("valid"), default=False)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("author"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    note = models.CharField(_("note"), max_length=200, blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("workflow draft version")
        verbose_name_plural = _("workflow draft versions")
        ordering = ["draft", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["draft", "version"], name="rag_workflows_one_row_per_draft_version")
        ]

    def __str__(self) -> str:
        return f"{self.draft.name} v{self.version}"
