"""The organisation's name and words in the admin (one row), and the one-click removal of the demo."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from rag.branding.models import Branding
from rag.branding.services import DemoError, branding_save, demo_remove


@admin.register(Branding)
class BrandingAdmin(admin.ModelAdmin):
    fieldsets = (
        (None, {"fields": (("name", "name_en"), ("tagline", "tagline_en"), ("welcome", "welcome_en"))}),
        (gettext("Suggested questions"), {"fields": (("suggestions", "suggestions_en"),)}),
        (
            gettext("Replies that cannot answer"),
            {"fields": (("contact", "contact_en"), ("out_of_scope", "out_of_scope_en"))},
        ),
        (gettext("Look and links"), {"fields": ("logo_url", "color", "privacy_url")}),
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # One row: the list is its form.
        Branding.objects.get_or_create(pk=1)
        return HttpResponseRedirect(reverse("admin:rag_branding_branding_change", args=[1]))

    def save_model(self, request: HttpRequest, obj: Branding, form: Any, change: bool) -> None:
        branding_save(row=obj)

    def get_urls(self) -> list[URLPattern]:
        remove = self.admin_site.admin_view(require_POST(self.demo_remove_view))
        return [path("demo/remove/", remove, name="rag_branding_demo_remove"), *super().get_urls()]

    def demo_remove_view(self, request: HttpRequest) -> HttpResponse:
        if not (
            request.user.has_perm("rag_branding.change_branding")
            and request.user.has_perm("rag_documents.add_indexjob")
        ):
            raise PermissionDenied
        try:
            job = demo_remove()
        except DemoError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:index"))
        if job is None:
            self.message_user(request, gettext("The demo's words were removed; it had no documents left."))
            return HttpResponseRedirect(reverse("admin:index"))
        self.message_user(
            request,
            gettext(
                "Demo removed: its files are deleted and its name and words replaced by neutral ones. "
                "Index job #%(job)d drops its documents from the index."
            )
            % {"job": job.pk},
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:rag_documents_indexjob_change", args=[job.pk]))
