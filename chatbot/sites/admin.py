"""Websites allowed to embed the assistant: staff add one, copy its script tag, switch it on or off."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from chatbot.sites.models import Site
from chatbot.sites.origins import origins_parse
from chatbot.sites.services import site_delete, site_save


class SiteForm(forms.ModelForm):
    class Meta:
        model = Site
        fields = (
            "name", "origins", "enabled", "default_language", "greeting", "suggestions", "color", "position",
            "daily_limit", "visitor_daily_limit",
        )  # fmt: skip

    def clean_origins(self) -> str:
        try:
            return "\n".join(origins_parse(self.cleaned_data["origins"]))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    form = SiteForm
    list_display = ("name", "origins_shown", "enabled", "default_language", "daily_limit", "visitor_daily_limit")
    list_filter = ("enabled",)
    readonly_fields = ("key", "script_tag")

    @admin.display(description=_("allowed origins"))
    def origins_shown(self, obj: Site) -> str:
        return ", ".join(obj.origins.splitlines())

    @admin.display(description=_("script tag"))
    def script_tag(self, obj: Site) -> str:
        if not obj.key:
            return "—"
        request = getattr(self, "_request", None)
        base = request.build_absolute_uri("/").rstrip("/") if request is not None else ""
        tag = f'<script src="{base}/widget.js" data-site="{obj.key}" async></script>'
        return format_html("<code>{}</code>", tag)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        self._request = request
        fields = list(SiteForm.Meta.fields)
        return [(None, {"fields": fields}), (_("On the website"), {"fields": ["key", "script_tag"]})]

    def save_model(self, request: HttpRequest, obj: Site, form: Any, change: bool) -> None:
        site_save(site=obj)

    def delete_model(self, request: HttpRequest, obj: Site) -> None:
        site_delete(site=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for site in queryset:
            site_delete(site=site)
