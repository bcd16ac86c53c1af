"""API keys in the admin: make one (its secret is shown on the next page, once), list them with their usage,
revoke them. The secret is never stored, so no page can show it again."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from chatbot.apikeys.models import SCOPES, ApiKey
from chatbot.apikeys.services import api_key_create, api_key_revoke, scopes_clean

SECRET_ATTRIBUTE = "_api_key_secret"


class ApiKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["chat"],
        label=_("scopes"),
        help_text=_("chat: the OpenAI-compatible API; admin-read / admin-write: the concurrency APIs"),
    )

    class Meta:
        model = ApiKey
        fields = ("name", "owner", "scopes", "rate_limit_per_minute", "expires_at")

    def clean_scopes(self) -> list[str]:
        try:
            return scopes_clean(self.cleaned_data["scopes"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now() and not self.instance.pk:
            raise forms.ValidationError(gettext("the expiry is in the past"))
        return expires_at


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = (
        "name",
        "prefix",
        "owner",
        "scope_list",
        "rate_limit_per_minute",
        "requests",
        "tokens",
        "estimated_tokens",
        "last_used_at",
        "state",
        "created_at",
    )
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "owner__username")
    readonly_fields = (
        "prefix",
        "requests",
        "tokens",
        "estimated_tokens",
        "last_used_at",
        "revoked_at",
        "created_at",
    )
    actions = ("revoke",)
    created_template = "admin/apikeys/apikey/created.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        return super().get_queryset(request).select_related("owner")

    @admin.display(description=_("scopes"))
    def scope_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.scopes or [])

    @admin.display(description=_("state"))
    def state(self, obj: ApiKey) -> str:
        if obj.revoked_at is not None:
            return gettext("revoked")
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            return gettext("expired")
        return gettext("active")

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        data = form.cleaned_data
        created = api_key_create(
            name=data["name"],
            owner=data.get("owner") or request.user,
            scopes=data["scopes"],
            rate_limit_per_minute=data["rate_limit_per_minute"],
            expires_at=data.get("expires_at"),
        )
        obj.pk = created.key.pk  # the admin's log entry and redirect refer to the row the service made
        obj.prefix = created.key.prefix
        setattr(request, SECRET_ATTRIBUTE, created.secret)

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        secret = getattr(request, SECRET_ATTRIBUTE, None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        key = ApiKey.objects.get(pk=obj.pk)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("API key %(prefix)s… created") % {"prefix": key.prefix},
            "key": key,
            "secret": secret,
            "base_url": request.build_absolute_uri("/v1"),
        }
        # The admin's views are never_cache already (no-store): the page with the secret stays in no cache.
        return TemplateResponse(request, self.created_template, context)

    @admin.action(description=_("Revoke the selected keys (at once, on every worker)"))
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(prefix=key.prefix)
            count += 1
        self.message_user(
            request,
            ngettext("%(count)d key revoked.", "%(count)d keys revoked.", count) % {"count": count},
            messages.SUCCESS,
        )
