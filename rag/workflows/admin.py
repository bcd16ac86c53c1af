"""Workflow drafts in the admin: the usual list, and the graph builder page where drafts are edited.

Adding or changing a draft opens the builder (a graph is not a form); the list stays for finding, sorting and
deleting drafts. A published draft cannot be deleted: unpublish it first, so a backend never loses its
pipeline by accident.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import get_language, gettext
from django.utils.translation import gettext_lazy as _

from rag.runtime import BACKENDS
from rag.workflows import selectors
from rag.workflows.api import MAX_ID
from rag.workflows.builder_words import builder_words
from rag.workflows.graphs import graph_check, node_catalogue
from rag.workflows.models import CheckResults, PromptCheck, PublishCheck, PublishTest, WorkflowDraft


@admin.register(WorkflowDraft)
class WorkflowDraftAdmin(admin.ModelAdmin):
    list_display = ("name", "version", "valid", "serving", "author", "updated_at", "builder_link")
    list_filter = ("valid", "published", "backend")
    search_fields = ("name",)
    builder_template = "admin/rag_workflows/builder.html"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.builder_view)
        return [
            path("builder/", view, name="{}_{}_builder".format(*info)),
            path("builder/<int:draft_id>/", view, name="{}_{}_builder".format(*info)),
            *super().get_urls(),
        ]

    def builder_url(self, draft_id: int | None = None) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_builder"
        return reverse(name, args=[draft_id] if draft_id is not None else [])

    @admin.display(description=_("serving"), ordering="backend")
    def serving(self, obj: WorkflowDraft) -> str:
        return f"{obj.backend} (v{obj.published_version})" if obj.published else "—"

    @admin.display(description="")
    def builder_link(self, obj: WorkflowDraft) -> str:
        return format_html('<a href="{}">{}</a>', self.builder_url(obj.pk), gettext("Open in graph builder"))

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        return HttpResponseRedirect(self.builder_url())

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        try:
            return HttpResponseRedirect(self.builder_url(int(object_id)))
        except ValueError:
            return super().change_view(request, object_id, form_url, extra_context)

    def has_delete_permission(self, request: HttpRequest, obj: WorkflowDraft | None = None) -> bool:
        if obj is not None and obj.published:
            return False
        return super().has_delete_permission(request, obj)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changelist_view(request, {**(extra_context or {}), "builder_url": self.builder_url()})

    def builder_view(self, request: HttpRequest, draft_id: int | None = None) -> HttpResponse:
        can_edit = self.has_change_permission(request)
        config = {
            "draftId": draft_id,
            "canEdit": can_edit,
            "backends": list(BACKENDS),
            "builderUrl": self.builder_url(),
            "changelistUrl": reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_changelist"),
            "initial": builder_initial(draft_id),
            "language": get_language(),
            "words": builder_words(),
            "api": {
                "nodes": reverse("rag_workflows:nodes"),
                "validate": reverse("rag_workflows:validate"),
                "testRun": reverse("rag_workflows:test-run"),
                "drafts": reverse("rag_workflows:drafts"),
                "default": reverse("rag_workflows:default"),
            },
        }
        context = {
            **self.admin_site.each_context(request),
            "title": _("Graph builder"),
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "builder_config": config,
            "can_edit": can_edit,
            "backends": BACKENDS,
        }
        return TemplateResponse(request, self.builder_template, context)


def builder_initial(draft_id: int | None) -> dict[str, Any]:
    """What the builder shows first, in the page itself: the catalogue, the drafts, the opened draft with its
    versions, and the engine's verdict on it. Fetched one after another, these were four round trips between the
    script's start and a usable canvas. `draft` is None for an unknown id: the script then asks the API, whose
    404 it reports as for any other draft."""
    initial: dict[str, Any] = {"nodes": node_catalogue(), "drafts": selectors.workflow_draft_list()}
    if draft_id is None:
        detail = selectors.workflow_default_detail()
        versions: list[dict[str, Any]] = []
    else:
        try:
            if draft_id > MAX_ID:
                raise WorkflowDraft.DoesNotExist
            draft = selectors.workflow_draft_get(draft_id=draft_id)
        except WorkflowDraft.DoesNotExist:
            return {**initial, "draft": None}
        detail = selectors.workflow_draft_detail(draft)
        versions = selectors.workflow_draft_versions(draft_id=draft_id)
    check = graph_check(detail["graph"])
    return {
        **initial,
        "draft": detail,
        "versions": versions,
        "check": {"valid": check.valid, "problems": check.problems},
    }


@admin.register(PublishTest)
class PublishTestAdmin(admin.ModelAdmin):
    """The test set every workflow version runs before it is published."""

    list_display = ("question", "facts", "sources", "active", "origin", "created_at")
    list_filter = ("active",)
    search_fields = ("question", "origin")

    @admin.display(description=_("facts the answer must contain"))
    def facts(self, obj: PublishTest) -> str:
        return ", ".join(map(str, obj.must_contain)) or "—"

    @admin.display(description=_("sources the answer must cite"))
    def sources(self, obj: PublishTest) -> str:
        return ", ".join(map(str, obj.must_cite)) or "—"


class CheckResultsAdmin(admin.ModelAdmin):
    """Read-only runs of the test set beside production: what both kinds of check show."""

    RESULTS = ("results_table", "passed", "failed", "regressions", "override_reason", "overridden_by", "created_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("results"))
    def results_table(self, obj: CheckResults) -> str:
        """Per test, the verdict of the version under test beside production's, with what each answer missed."""
        return render_to_string("admin/rag_workflows/publish_results.html", {"results": obj.results})


@admin.register(PublishCheck)
class PublishCheckAdmin(CheckResultsAdmin):
    """Runs of the test set against draft versions, with production's results beside them, and overrides."""

    list_display = ("draft", "version", "backend", "passed", "failed", "regressions", "overridden_by", "created_at")
    list_filter = ("backend",)
    readonly_fields = ("draft", "version", "backend", *CheckResultsAdmin.RESULTS)


@admin.register(PromptCheck)
class PromptCheckAdmin(CheckResultsAdmin):
    """Runs of the test set with a prompt version beside the production prompts, and overrides."""

    list_display = (
        "prompt_name",
        "prompt_version",
        "backend",
        "passed",
        "failed",
        "regressions",
        "overridden_by",
        "created_at",
    )
    list_filter = ("prompt_name", "backend")
    readonly_fields = ("prompt_name", "prompt_version", "backend", *CheckResultsAdmin.RESULTS)
