"""The one row of live LLM concurrency settings, edited in the admin console and applied by every worker.

The row is a singleton (pk=1) created from the environment's seed values on first use
(``concurrency.selectors.concurrency_settings_get``). Writes go through
``concurrency.services.concurrency_settings_update``, which validates, bumps ``version`` and broadcasts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

__all__ = ["BACKENDS", "EDITABLE_FIELDS", "ConcurrencySettings"]

# The manager's backends (concurrency.manager.KNOWN_BACKENDS), each with its own limit and rpm column.
BACKENDS = ("default", "chat", "responses", "embedding")

MAX_LIMIT = 4096  # same bound as LLM_MAX_CONCURRENT_* in the settings
MAX_SECONDS = 3600.0  # no wait, backoff or request should be allowed to last longer than an hour


def _seconds(*, minimum: float, help_text: StrOrPromise, verbose_name: StrOrPromise) -> models.FloatField:
    return models.FloatField(
        verbose_name,
        validators=[MinValueValidator(minimum), MaxValueValidator(MAX_SECONDS)],
        help_text=help_text,
    )


def _limit(backend: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(
        format_lazy(_("{backend} limit"), backend=backend),
        validators=[MinValueValidator(1), MaxValueValidator(MAX_LIMIT)],
        help_text=format_lazy(
            _(
                "Concurrent LLM calls on the '{backend}' backend: for the whole cluster with Redis, else per worker; "
                "match vLLM's --max-num-seqs."
            ),
            backend=backend,
        ),
    )


def _rpm(backend: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(
        format_lazy(_("{backend} requests/minute"), backend=backend),
        validators=[MaxValueValidator(1_000_000)],
        help_text=format_lazy(
            _("Sliding-window requests per minute on the '{backend}' backend; 0 = unlimited."), backend=backend
        ),
    )


class ConcurrencySettings(models.Model):
    SINGLETON_PK = 1

    limit_default = _limit("default")
    limit_chat = _limit("chat")
    limit_responses = _limit("responses")
    limit_embedding = _limit("embedding")

    priority_enabled = models.BooleanField(
        _("priority mode"),
        default=False,
        help_text=_("Off: first come, first served. On: requests that have completed more LLM calls go first."),
    )
    starvation_threshold = _seconds(
        minimum=0.0,
        verbose_name=_("starvation threshold (s)"),
        help_text=_("In priority mode, a call waiting this long is served before any other; 0 behaves like FIFO."),
    )
    acquire_timeout = _seconds(
        minimum=0.0,
        verbose_name=_("acquire timeout (s)"),
        help_text=_("Longest wait for a slot before the call fails with 'busy'."),
    )
    max_waiters = models.PositiveIntegerField(
        _("max waiters"),
        validators=[MaxValueValidator(100_000)],
        help_text=_("Calls allowed to queue per backend and worker; past it, new calls fail at once with 'busy'."),
    )

    rpm_default = _rpm("default")
    rpm_chat = _rpm("chat")
    rpm_responses = _rpm("responses")
    rpm_embedding = _rpm("embedding")

    retry_max_attempts = models.PositiveIntegerField(
        _("retry: max attempts"),
        validators=[MinValueValidator(1), MaxValueValidator(50)],
        help_text=_("Attempts per LLM call, the first one included."),
    )
    retry_base_seconds = _seconds(
        minimum=0.0,
        verbose_name=_("retry: base backoff (s)"),
        help_text=_("Backoff before the first retry (doubled after)."),
    )
    retry_max_seconds = _seconds(
        minimum=0.0, verbose_name=_("retry: max backoff (s)"), help_text=_("Upper bound of one backoff sleep.")
    )
    llm_request_timeout = _seconds(
        minimum=0.0,
        verbose_name=_("LLM request timeout (s)"),
        help_text=_("Total deadline of one LLM call: slot wait, attempts and backoff included."),
    )
    telemetry_sample_rate = models.FloatField(
        _("telemetry sample rate"),
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text=_("Share of requests traced to Langfuse, from 0 (none) to 1 (all)."),
    )

    version = models.PositiveIntegerField(_("version"), default=1, editable=False)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("updated by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )

    class Meta:
        verbose_name = _("LLM concurrency settings")
        verbose_name_plural = _("LLM concurrency settings")

    def __str__(self) -> str:
        return f"LLM concurrency settings v{self.version}"

    # Timeouts: 0 would fail every call (or every contended one) at once; the validators allow >= 0, clean() > 0.
    POSITIVE_SECONDS = ("acquire_timeout", "llm_request_timeout")

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        numbers: dict[str, float] = {}
        for field in self._meta.concrete_fields:
            value = getattr(self, field.attname)
            if isinstance(field, models.FloatField) and isinstance(value, int | float):
                if not math.isfinite(value):  # a form rejects inf/nan already; a service caller might not
                    errors.setdefault(field.name, []).append("Enter a finite number.")
                else:
                    numbers[field.name] = float(value)
        for name in self.POSITIVE_SECONDS:
            if name in numbers and numbers[name] <= 0:
                errors.setdefault(name, []).append("Must be more than 0 seconds.")
        base, cap = numbers.get("retry_base_seconds"), numbers.get("retry_max_seconds")
        if base is not None and cap is not None and cap < base:
            errors.setdefault("retry_max_seconds", []).append("The max backoff must be at least the base backoff.")
        if errors:
            raise ValidationError(errors)

    def limits(self) -> dict[str, int]:
        return {backend: getattr(self, f"limit_{backend}") for backend in BACKENDS}

    def rpm(self) -> dict[str, int]:
        return {backend: getattr(self, f"rpm_{backend}") for backend in BACKENDS}


# What the console form and the update service may change; version and the audit fields are not.
EDITABLE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in ConcurrencySettings._meta.concrete_fields if f.editable and not f.primary_key
)
