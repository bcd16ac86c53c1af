"""The stored settings row, read: what the console saved, as the snapshot every worker applies.

Here rather than in `concurrency.selectors` so that the change feed's settings handler reads the row without
importing the selectors, which import this package.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from concurrency.live.snapshot import SettingsSnapshot
from concurrency.models import BACKENDS, ConcurrencySettings

__all__ = [
    "concurrency_settings_defaults",
    "concurrency_settings_get",
    "concurrency_settings_snapshot",
    "concurrency_settings_version",
    "settings_snapshot_of",
]


def concurrency_settings_defaults() -> dict[str, Any]:
    """The row's values on first use: the environment-seeded settings (seed names, chatbot/settings.py)."""
    rpm = settings.LLM_RPM_LIMIT
    return {
        "limit_default": settings.LLM_MAX_CONCURRENT_DEFAULT,
        "limit_chat": settings.LLM_MAX_CONCURRENT_CHAT,
        "limit_responses": settings.LLM_MAX_CONCURRENT_RESPONSES,
        "limit_embedding": settings.LLM_MAX_CONCURRENT_EMBEDDING,
        "priority_enabled": settings.LLM_PRIORITY_ENABLED,
        "starvation_threshold": settings.LLM_PRIORITY_STARVATION_THRESHOLD,
        "acquire_timeout": settings.LLM_ACQUIRE_TIMEOUT,
        "max_waiters": settings.LLM_MAX_WAITERS,
        **{f"rpm_{backend}": rpm for backend in BACKENDS},
        "retry_max_attempts": settings.LLM_RETRY_MAX_ATTEMPTS,
        "retry_base_seconds": settings.LLM_RETRY_BASE_SECONDS,
        "retry_max_seconds": settings.LLM_RETRY_MAX_SECONDS,
        "llm_request_timeout": settings.LLM_REQUEST_TIMEOUT,
        "telemetry_sample_rate": settings.LANGFUSE_SAMPLE_RATE,
    }


def concurrency_settings_get() -> ConcurrencySettings:
    """The settings row, created from the environment's defaults on first use."""
    row = ConcurrencySettings.objects.select_related("updated_by").filter(pk=ConcurrencySettings.SINGLETON_PK).first()
    if row is not None:
        return row
    try:
        with transaction.atomic():
            return ConcurrencySettings.objects.create(
                pk=ConcurrencySettings.SINGLETON_PK, **concurrency_settings_defaults()
            )
    except IntegrityError:  # another worker created it first
        return ConcurrencySettings.objects.select_related("updated_by").get(pk=ConcurrencySettings.SINGLETON_PK)


def concurrency_settings_version() -> int | None:
    """The row's version, one indexed read (the workers' periodic check); None before the row exists."""
    return (
        ConcurrencySettings.objects.filter(pk=ConcurrencySettings.SINGLETON_PK)
        .values_list("version", flat=True)
        .first()
    )


def settings_snapshot_of(row: ConcurrencySettings) -> SettingsSnapshot:
    return SettingsSnapshot(
        version=row.version,
        limits=row.limits(),
        priority_enabled=row.priority_enabled,
        starvation_threshold=float(row.starvation_threshold),
        acquire_timeout=float(row.acquire_timeout),
        max_waiters=row.max_waiters,
        rpm=row.rpm(),
        retry_max_attempts=row.retry_max_attempts,
        retry_base_seconds=float(row.retry_base_seconds),
        retry_max_seconds=float(row.retry_max_seconds),
        llm_request_timeout=float(row.llm_request_timeout),
        telemetry_sample_rate=float(row.telemetry_sample_rate),
        updated_at=row.updated_at.isoformat() if row.updated_at else None,
        updated_by=row.updated_by.get_username() if row.updated_by_id and row.updated_by else None,
    )


def concurrency_settings_snapshot() -> SettingsSnapshot:
    return settings_snapshot_of(concurrency_settings_get())
