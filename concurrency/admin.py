"""The LLM concurrency console: live gauges and charts per backend and worker, and the settings form.

One admin page replaces the usual changelist/change form of the singleton settings row: the admin index links
to it, saving goes through ``concurrency_settings_update`` (validated, versioned, applied live in every worker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, gettext_noop, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from concurrency.models import BACKENDS, EDITABLE_FIELDS, ConcurrencySettings
from concurrency.selectors import (
    concurrency_settings_env_differences,
    concurrency_settings_get,
    concurrency_status,
    settings_snapshot_of,
)
from concurrency.services import concurrency_settings_update

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

# (title, description, fields) of the form's sections, in page order.
CONSOLE_FIELDSETS: tuple[tuple[StrOrPromise, StrOrPromise, tuple[str, ...]], ...] = (
    (
        _("Concurrency limits"),
        _("Concurrent LLM calls per backend in each worker. Match vLLM's --max-num-seqs divided by the workers."),
        tuple(f"limit_{b}" for b in BACKENDS),
    ),
    (
        _("Queueing"),
        _("How calls wait for a slot, and when they give up with 'busy'."),
        ("priority_enabled", "starvation_threshold", "acquire_timeout", "max_waiters"),
    ),
    (
        _("Requests per minute"),
        _("Sliding window per backend and worker; 0 = unlimited."),
        tuple(f"rpm_{b}" for b in BACKENDS),
    ),
    (
        _("Retries and timeouts"),
        _("429, 5xx, timeouts and dropped connections are retried with exponential backoff and jitter."),
        ("retry_max_attempts", "retry_base_seconds", "retry_max_seconds", "llm_request_timeout"),
    ),
    (_("Telemetry"), "", ("telemetry_sample_rate",)),
)


# What the console's script writes, by its English: the page carries them in the admin's language, and the script
# fills each {placeholder} itself (so a translation keeps them). A text missing here stays English on the page.
CONSOLE_WORDS: tuple[str, ...] = (
    gettext_noop("{worker} (this one)"),
    gettext_noop("+{count} waiting"),
    gettext_noop("now"),
    gettext_noop("{seconds} s ago"),
    gettext_noop("no worker reported"),
    gettext_noop("priority mode · starvation boost after {seconds} s"),
    gettext_noop("FIFO mode"),
    gettext_noop("(no request)"),
    gettext_noop("{priority} boosted"),
    gettext_noop("{ms} ms"),
    gettext_noop("nobody is waiting"),
    gettext_noop("none"),
    gettext_noop("cluster-wide ({state})"),
    gettext_noop("{state}: {count} workers share it"),
    gettext_noop("per worker"),
    gettext_noop("signed out: reload the page"),
    gettext_noop("live · {time}"),
    gettext_noop("no answer ({error}), retrying"),
    gettext_noop("timeout"),
    gettext_noop("{now} (max {peak})"),
    gettext_noop("{chart}: now {now}, max {peak}"),
    gettext_noop("offline"),
    gettext_noop("structured output as {mode}"),
    gettext_noop("usage counted here"),
    gettext_noop("no stream_options"),
    gettext_noop("no Responses API"),
    gettext_noop("prefill {ms} ms per 1k tokens"),
)

# The manager's modes and the cluster's states as the status API names them; the script looks them up as
# "mode priority", "state degraded" (the bare words mean other things elsewhere in the admin).
CONSOLE_STATES: dict[str, StrOrPromise] = {
    "mode priority": pgettext_lazy("concurrency mode", "priority"),
    "mode fifo": pgettext_lazy("concurrency mode", "fifo"),
    "state degraded": pgettext_lazy("cluster state", "degraded"),
    "state recovering": pgettext_lazy("cluster state", "recovering"),
}


def console_words() -> dict[str, str]:
    """English -> the active language, for every text the console's script writes."""
    words = {text: gettext(text) for text in CONSOLE_WORDS}
    words.update({key: str(word) for key, word in CONSOLE_STATES.items()})
    return words


class ConcurrencySettingsForm(forms.ModelForm):
    # The version the editor loaded: saving over someone else's newer change is refused, not silent.
    expected_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)

    class Meta:
        model = ConcurrencySettings
        fields = EDITABLE_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound and self.instance.pk:
            self.initial["expected_version"] = self.instance.version

    def fieldsets(self) -> list[dict[str, Any]]:
        return [
            {"title": title, "description": description, "fields": [self[name] for name in names]}
            for title, description, names in CONSOLE_FIELDSETS
        ]


@admin.register(ConcurrencySettings)
class ConcurrencySettingsAdmin(admin.ModelAdmin):
    console_template = "admin/concurrency/console.html"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path("console/", self.admin_site.admin_view(self.console_view), name="{}_{}_console".format(*info)),
            *super().get_urls(),
        ]

    def _console_url(self) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_console")

    # The singleton has no list, no add and no delete: every entry point leads to the console.
    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return HttpResponseRedirect(self._console_url())

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return HttpResponseRedirect(self._console_url())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ConcurrencySettings | None = None) -> bool:
        return False

    # -------------------------------------------------------------------------------------------- console

    def console_view(self, request: HttpRequest) -> HttpResponse:
        row = concurrency_settings_get()
        can_edit = self.has_change_permission(request, row)
        if request.method == "POST":
            if not can_edit:
                raise PermissionDenied
            form = ConcurrencySettingsForm(request.POST, instance=row)
            if form.is_valid():
                try:
                    saved = concurrency_settings_update(
                        user=request.user,
                        expected_version=form.cleaned_data["expected_version"],
                        **{name: form.cleaned_data[name] for name in EDITABLE_FIELDS},
                    )
                except ValidationError as exc:
                    form.add_error(None, exc)
                else:
                    messages.success(
                        request,
                        gettext("Saved version %(version)d. Every worker applies it within a second.")
                        % {"version": saved.version},
                    )
                    return HttpResponseRedirect(request.path)
            row = concurrency_settings_get()  # the form validated a modified copy: show the stored state
        else:
            form = ConcurrencySettingsForm(instance=row)
        if not can_edit:
            for field in form.fields.values():
                field.disabled = True
        return TemplateResponse(request, self.console_template, self._console_context(request, row, form, can_edit))

    def _console_context(
        self, request: HttpRequest, row: ConcurrencySettings, form: ConcurrencySettingsForm, can_edit: bool
    ) -> dict[str, Any]:
        status_url = reverse("concurrency:status")
        status = concurrency_status()
        return {
            **self.admin_site.each_context(request),
            "title": _("LLM concurrency console"),
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "row": row,
            "form": form,
            "can_edit": can_edit,
            "backends": BACKENDS,
            "status_url": status_url,
            "initial_status": status,
            # the environment's values the saved settings override (a deployment's changed LLM_MAX_CONCURRENT_*)
            "env_differences": concurrency_settings_env_differences(snapshot=settings_snapshot_of(row)),
            "console_words": console_words(),
            # the pipeline reports its answers as the "answers" extra of each worker
            "degraded_answers": sum(
                int(((worker.get("extra") or {}).get("answers") or {}).get("degraded", 0))
                for worker in status["workers"]
            ),
            "media": self.media + form.media,
        }
