"""Writes: changing the live settings row. Every worker applies the change within a second."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from concurrency.live import SETTINGS_TOPIC, settings_apply_soon
from concurrency.models import EDITABLE_FIELDS, ConcurrencySettings
from concurrency.selectors import (
    EnvironmentDifference,
    concurrency_settings_env_differences,
    concurrency_settings_get,
    settings_snapshot_of,
)
from infra.changefeed import publish_on_commit

__all__ = ["concurrency_settings_from_environment", "concurrency_settings_update"]

logger = logging.getLogger(__name__)


def concurrency_settings_update(
    *, user: Any = None, expected_version: int | None = None, **fields: Any
) -> ConcurrencySettings:
    """Validate and save ``fields`` on the settings row, bump its version, and after commit apply the change here
    and publish it to the other workers.

    ``expected_version``: the version the editor saw; if someone saved in between, nothing is written and a
    ValidationError says so (instead of silently undoing their change). Raises ValidationError with per-field
    messages for invalid values, and TypeError for unknown field names (a programming error, not user input).
    """
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise TypeError(f"not editable LLM concurrency settings: {', '.join(unknown)}")
    concurrency_settings_get()  # make sure the row exists before locking it
    with transaction.atomic():
        row = ConcurrencySettings.objects.select_for_update().get(pk=ConcurrencySettings.SINGLETON_PK)
        if expected_version is not None and row.version != expected_version:
            raise ValidationError(
                f"The settings were changed by someone else meanwhile (now version {row.version}, you edited "
                f"version {expected_version}). Reload the page and apply your change again.",
                code="stale",
            )
        for name, value in fields.items():
            setattr(row, name, value)
        row.full_clean(exclude=["updated_by"])
        row.version += 1
        row.updated_by = user if getattr(user, "is_authenticated", False) and getattr(user, "pk", None) else None
        row.save()
        snapshot = settings_snapshot_of(row)
        transaction.on_commit(lambda: settings_apply_soon(snapshot))  # this process, at once
        publish_on_commit(SETTINGS_TOPIC)  # every worker, through the change feed
    logger.info("LLM concurrency settings v%s saved by %s: %s", row.version, snapshot.updated_by or "-", sorted(fields))
    return row


def concurrency_settings_from_environment(
    *, user: Any = None, dry_run: bool = False
) -> tuple[ConcurrencySettings, list[EnvironmentDifference]]:
    """Save the environment's values (`LLM_MAX_CONCURRENT_*` and the rest, where set) over the saved settings,
    through `concurrency_settings_update`: validated, versioned and applied live by every worker. Refused (a
    ValidationError) if someone saved meanwhile. Returns the row and what changed; nothing is written when
    nothing differs or with `dry_run`."""
    row = concurrency_settings_get()
    differences = concurrency_settings_env_differences(snapshot=settings_snapshot_of(row))
    if not differences or dry_run:
        return row, differences
    changes = {difference.field: difference.environment for difference in differences}
    return concurrency_settings_update(user=user, expected_version=row.version, **changes), differences
