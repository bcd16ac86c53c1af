"""Prompt versions in the admin: edits create new versions, labels move by action or button, diffs on demand.

The admin stays thin: every write goes through `prompts.services`, which validate, lock and invalidate the
prompts that workers hold in memory.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from prompts.catalogue import CATALOGUE, PRODUCTION, STAGING
from prompts.errors import PromptError, PromptPublishBlocked
from prompts.forms import ASSIGNABLE_LABELS, PromptVersionForm
from prompts.models import Prompt
from prompts.selectors import prompt_versions_list
from prompts.services import prompt_diff, prompt_label_move, prompt_rollback, prompt_version_create


class LabelFilter(admin.SimpleListFilter):
    title = _("label")
    parameter_name = "label"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(label, label) for label in (PRODUCTION, STAGING, "latest")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Prompt]) -> QuerySet[Prompt]:
        value = self.value()
        if value:
            # Matches the quoted label inside the JSON text: portable where JSON containment is not (SQLite).
            return queryset.filter(labels__icontains=f'"{value}"')
        return queryset


def _copy_row(target: Prompt, source: Prompt) -> None:
    """Make the admin's object the new version, so its messages, log entry and redirects point there."""
    for field in Prompt._meta.concrete_fields:
        setattr(target, field.attname, getattr(source, field.attname))
    target._state.adding = False


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    form = PromptVersionForm
    change_form_template = "admin/prompts/prompt/change_form.html"
    list_display = ("name", "version_display", "labels_display", "note", "author", "created_at")
    list_display_links = ("name", "version_display")
    list_filter = (LabelFilter, "name")
    search_fields = ("name", "note", "template")
    ordering = ("name", "-version")
    list_select_related = ("author",)
    list_per_page = 50
    actions = ("promote_production", "promote_staging", "rollback_production", "compare_selected")

    # --- forms ---------------------------------------------------------------------------------------------
    def get_fieldsets(self, request: HttpRequest, obj: Prompt | None = None) -> Any:
        new_version = ("template", "config", "note", "also_label")
        if obj is None:
            return [(None, {"fields": ("name", *new_version)})]
        return [
            (_("This version"), {"fields": ("name", "version", "labels", "author", "created_at")}),
            (
                _("Save as a new version"),
                {"fields": new_version, "description": _("Saving never changes this version.")},
            ),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Prompt | None = None) -> Any:
        return ("name", "version", "labels", "author", "created_at") if obj is not None else ()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial: dict[str, Any] = super().get_changeform_initial_data(request)
        name = initial.get("name")
        if isinstance(name, str) and name in CATALOGUE:
            newest = Prompt.objects.filter(name=name).order_by("-version").first()
            initial.setdefault("template", newest.template if newest else CATALOGUE[name].template)
            initial.setdefault("config", newest.config if newest else dict(CATALOGUE[name].config))
        return initial

    def save_model(self, request: HttpRequest, obj: Prompt, form: PromptVersionForm, change: bool) -> None:
        labels = form.cleaned_data.get("also_label") or []
        edited_version = obj.version if change else None
        if change and not form.changes_version():
            for label in labels:  # same text and config: the labels go to the edited version itself
                self._label_unchanged(request, obj, label)
            if not labels:
                self.message_user(
                    request, gettext("Template and config unchanged: no new version created."), messages.INFO
                )
            return
        fields = {
            "name": form.prompt_name() or obj.name,
            "template": form.cleaned_data["template"],
            "config": form.cleaned_data.get("config"),
            "author": request.user,
            "note": form.cleaned_data.get("note", ""),
        }
        try:
            created = prompt_version_create(**fields, labels=labels)
        except PromptPublishBlocked as exc:
            # a new version was never run against the publish tests: saved, but not made production
            created = prompt_version_create(**fields, labels=[label for label in labels if label != PRODUCTION])
            self.message_user(request, gettext("Not made production: %(reason)s") % {"reason": exc}, messages.WARNING)
        _copy_row(obj, created)
        if edited_version is not None:
            self.message_user(
                request,
                gettext("Saved as %(new)s; v%(old)d is unchanged. Labels of the new version: %(labels)s.")
                % {"new": created, "old": edited_version, "labels": ", ".join(created.labels)},
                messages.SUCCESS,
            )

    def _label_unchanged(self, request: HttpRequest, obj: Prompt, label: str) -> None:
        try:
            _copy_row(obj, prompt_label_move(name=obj.name, label=label, version=obj.version))
        except PromptPublishBlocked as exc:
            self.message_user(request, gettext("Not made production: %(reason)s") % {"reason": exc}, messages.WARNING)

    def has_delete_permission(self, request: HttpRequest, obj: Prompt | None = None) -> bool:
        return False  # versions are history; roll back by moving a label instead

    # --- changelist columns --------------------------------------------------------------------------------
    @admin.display(description=_("version"), ordering="version")
    def version_display(self, obj: Prompt) -> str:
        return f"v{obj.version}"

    @admin.display(description=_("labels"))
    def labels_display(self, obj: Prompt) -> str:
        return format_html_join(
            " ",
            '<span style="padding:1px 6px;border-radius:8px;background:{};color:#fff">{}</span>',
            ((_LABEL_COLOURS.get(label, "#777"), label) for label in obj.labels),
        )

    # --- actions -------------------------------------------------------------------------------------------
    def _promote(self, request: HttpRequest, queryset: QuerySet[Prompt], label: str) -> None:
        by_name: dict[str, list[int]] = defaultdict(list)
        for name, version in queryset.values_list("name", "version"):
            by_name[name].append(version)
        for name, versions in sorted(by_name.items()):
            if len(versions) != 1:
                self.message_user(
                    request,
                    gettext("%(name)s: select one version to promote to %(label)s.") % {"name": name, "label": label},
                    messages.ERROR,
                )
                continue
            try:
                moved = prompt_label_move(name=name, label=label, version=versions[0])
            except PromptError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(
                    request,
                    gettext("%(prompt)s is now %(label)s.") % {"prompt": moved, "label": label},
                    messages.SUCCESS,
                )

    @admin.action(description=_("Promote the selected version to production"), permissions=["change"])
    def promote_production(self, request: HttpRequest, queryset: QuerySet[Prompt]) -> None:
        self._promote(request, queryset, PRODUCTION)

    @admin.action(description=_("Promote the selected version to staging"), permissions=["change"])
    def promote_staging(self, request: HttpRequest, queryset: QuerySet[Prompt]) -> None:
        self._promote(request, queryset, STAGING)

    @admin.action(description=_("Roll back production to the previous version"), permissions=["change"])
    def rollback_production(self, request: HttpRequest, queryset: QuerySet[Prompt]) -> None:
        for name in sorted(set(queryset.values_list("name", flat=True))):
            try:
                moved = prompt_rollback(name=name, label=PRODUCTION)
            except PromptError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(
                    request, gettext("Rolled back: %(prompt)s is now production.") % {"prompt": moved}, messages.SUCCESS
                )

    @admin.action(description=_("Compare the two selected versions"), permissions=["view"])
    def compare_selected(self, request: HttpRequest, queryset: QuerySet[Prompt]) -> HttpResponse | None:
        rows = sorted(queryset.values_list("name", "version"))
        if len(rows) != 2 or rows[0][0] != rows[1][0]:
            self.message_user(
                request, gettext("Select exactly two versions of the same prompt to compare."), messages.ERROR
            )
            return None
        return HttpResponseRedirect(self._compare_url(rows[0][0], rows[0][1], rows[1][1]))

    # --- custom pages --------------------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        custom = [
            path("compare/", wrap(self.compare_view), name="prompts_prompt_compare"),
            path("<int:object_id>/label/<slug:label>/", wrap(self.label_view), name="prompts_prompt_label"),
        ]
        return custom + super().get_urls()

    def _compare_url(self, name: str, version_a: int, version_b: int) -> str:
        params: dict[str, str | int] = {"name": name, "a": version_a, "b": version_b}
        query = urlencode(params)
        return f"{reverse('admin:prompts_prompt_compare', current_app=self.admin_site.name)}?{query}"

    def compare_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        name = request.GET.get("name", "")
        versions = prompt_versions_list(name=name) if name in CATALOGUE else []
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Compare prompt versions"),
            "names": sorted(CATALOGUE),
            "name": name,
            "versions": versions,
            "diff_lines": [],
            "compared": False,
            "error": "",
        }
        if not versions:
            if name:
                context["error"] = gettext("No versions of '%(name)s'.") % {"name": name}
            return TemplateResponse(request, "admin/prompts/prompt/compare.html", context)
        # Defaults: the production version against the newest one.
        production = next((v for v, labels in versions if PRODUCTION in labels), versions[-1][0])
        version_a = _int_param(request, "a", production)
        version_b = _int_param(request, "b", versions[0][0])
        context.update(version_a=version_a, version_b=version_b)
        try:
            diff = prompt_diff(name=name, version_a=version_a, version_b=version_b)
        except PromptError as exc:
            context["error"] = str(exc)
        else:
            context["compared"] = True
            context["diff_lines"] = [(_diff_kind(line), line) for line in diff.splitlines()]
        return TemplateResponse(request, "admin/prompts/prompt/compare.html", context)

    def label_view(self, request: HttpRequest, object_id: int, label: str) -> HttpResponse:
        """Give `label` (production or staging) to this version: the promote and roll-back buttons."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        prompt = get_object_or_404(Prompt, pk=object_id)
        change_url = reverse("admin:prompts_prompt_change", args=[prompt.pk], current_app=self.admin_site.name)
        if label not in ASSIGNABLE_LABELS:
            self.message_user(request, gettext("Unknown label '%(label)s'.") % {"label": label}, messages.ERROR)
            return HttpResponseRedirect(change_url)
        try:
            moved = prompt_label_move(
                name=prompt.name,
                label=label,
                version=prompt.version,
                override_reason=str(request.POST.get("override_reason", "")),
                overridden_by=request.user.get_username(),
            )
        except PromptPublishBlocked as exc:
            # the version's page then offers the override: the same button with a reason, which is recorded
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(f"{change_url}?{urlencode({'blocked': label})}")
        except PromptError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.log_change(request, moved, [{"changed": {"fields": ["labels"]}}])
            self.message_user(
                request,
                format_html(gettext("{prompt} is now <b>{label}</b>."), prompt=moved, label=label),
                messages.SUCCESS,
            )
        return HttpResponseRedirect(change_url)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        obj = Prompt.objects.filter(pk=object_id).only("name", "version").first() if object_id.isdigit() else None
        if obj is not None:
            extra["assignable_labels"] = ASSIGNABLE_LABELS
            extra["blocked_label"] = request.GET.get("blocked") if request.GET.get("blocked") == PRODUCTION else None
            # Against production by default (the compare page's default for a missing `a`).
            params: dict[str, str | int] = {"name": obj.name, "b": obj.version}
            extra["compare_url"] = (
                f"{reverse('admin:prompts_prompt_compare', current_app=self.admin_site.name)}?{urlencode(params)}"
            )
        return super().change_view(request, object_id, form_url, extra)


_LABEL_COLOURS = {PRODUCTION: "#2e7d32", STAGING: "#ef6c00", "latest": "#1565c0"}


def _int_param(request: HttpRequest, key: str, default: int) -> int:
    try:
        return int(request.GET[key])
    except (KeyError, ValueError):
        return default


def _diff_kind(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "added"
    if line.startswith("-"):
        return "removed"
    return "context"
