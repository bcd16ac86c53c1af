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


class PublishTest(models.Model):
    """One question of the test set a workflow must pass before it is published: the facts its answer must
    contain and the sources (document ids or links) it must cite."""

    question = models.TextField(_("question"))
    must_contain = models.JSONField(_("facts the answer must contain"), default=list, blank=True)
    must_cite = models.JSONField(_("sources the answer must cite"), default=list, blank=True)
    active = models.BooleanField(_("active"), default=True)
    origin = models.CharField(_("origin"), max_length=200, blank=True)  # eval_answers file, logged request id...
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("publish test")
        verbose_name_plural = _("publish tests")
        ordering = ["id"]

    def __str__(self) -> str:
        return self.question[:80]


class CheckResults(models.Model):
    """What a run of the test set beside production found, and the override that let a regression through: the
    fields a workflow draft's check and a prompt version's check share."""

    backend = models.CharField(_("backend"), max_length=16)
    results = models.JSONField(_("results"), default=list)
    passed = models.PositiveIntegerField(_("passed"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    regressions = models.PositiveIntegerField(_("regressions"), default=0)
    override_reason = models.TextField(_("override reason"), blank=True)
    overridden_by = models.CharField(_("overridden by"), max_length=150, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        abstract = True


class PublishCheck(CheckResults):
    """The test set run against one version of a draft beside the production workflow of its backend; a regression
    (a test production passes and the draft fails) blocks publishing that version unless staff override it with a
    reason, recorded here."""

    draft = models.ForeignKey(WorkflowDraft, verbose_name=_("draft"), on_delete=models.CASCADE, related_name="checks")
    version = models.PositiveIntegerField(_("version"))

    class Meta:
        verbose_name = _("publish check")
        verbose_name_plural = _("publish checks")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"draft {self.draft_id} v{self.version}: {self.passed} passed, {self.regressions} regressions"


class PromptCheck(CheckResults):
    """The test set run with one version of a prompt beside the production prompts (the sibling of PublishCheck
    for prompt versions): a regression blocks giving that version the production label unless staff override it
    with a reason, recorded here."""

    prompt_name = models.CharField(_("prompt"), max_length=100)
    prompt_version = models.PositiveIntegerField(_("prompt version"))

    class Meta:
        verbose_name = _("prompt check")
        verbose_name_plural = _("prompt checks")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["prompt_name", "prompt_version"], name="rag_wf_promptcheck_version")]

    def __str__(self) -> str:
        return f"{self.prompt_name} v{self.prompt_version}: {self.passed} passed, {self.regressions} regressions"
