"""Workflow drafts edited in the graph builder, and the archive of every saved version.

A draft's `graph` is the engine's JSON shape (`WorkflowDefinition.to_dict()`), plus an optional `layout` key with
the canvas positions, which the engine ignores. Publishing copies the saved graph into `published_graph`, so
editing a published draft never changes what serves traffic until it is published again.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

BACKEND_CHOICES = [("chat", "chat"), ("responses", "responses")]


class WorkflowDraft(models.Model):
    name = models.CharField(max_length=100, unique=True)
    graph = models.JSONField(default=dict)
    version = models.PositiveIntegerField(default=1)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The engine's validator on the saved graph: a list of {"code", "message", "node"}.
    problems = models.JSONField(default=list, blank=True)
    valid = models.BooleanField(default=False)
    published = models.BooleanField(default=False)
    backend = models.CharField(
        max_length=16, choices=BACKEND_CHOICES, blank=True, default="", help_text="The backend it serves when published"
    )
    published_version = models.PositiveIntegerField(null=True, blank=True)
    published_graph = models.JSONField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
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

    draft = models.ForeignKey(WorkflowDraft, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    graph = models.JSONField()
    valid = models.BooleanField(default=False)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["draft", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["draft", "version"], name="rag_workflows_one_row_per_draft_version")
        ]

    def __str__(self) -> str:
        return f"{self.draft.name} v{self.version}"
