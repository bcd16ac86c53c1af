"""`PATCH /api/v1/admin/concurrency/settings`: a JSON change of the live settings, checked as the console's form
checks it, saved by the same service.

The body names the fields to change, with the settings row's names (`limit_chat`, `max_waiters`,
`priority_enabled`...), or the shape `GET` returns: `"limits": {"chat": 4}`, `"rpm": {"chat": 120}`. Fields not
named keep their value. `expected_version` (optional) refuses the change with 409 when someone saved meanwhile.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from concurrency.admin import ConcurrencySettingsForm
from concurrency.models import BACKENDS, EDITABLE_FIELDS, ConcurrencySettings
from concurrency.selectors import concurrency_settings_get
from concurrency.services import concurrency_settings_update
from infra.jsonio import JsonInputError, json_decode

__all__ = ["SettingsPatchError", "settings_patch_apply", "settings_patch_parse"]

_GROUPS = {"limits": "limit_", "rpm": "rpm_"}


class SettingsPatchError(Exception):
    """A change refused: HTTP status, error code, a detail naming what was wrong, per-field messages."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def _bad(detail: str, **extra: Any) -> SettingsPatchError:
    return SettingsPatchError(400, "bad_request", detail, **extra)


def settings_patch_parse(content_type: str, body: bytes) -> tuple[dict[str, Any], int | None]:
    """(changes by field name, expected_version) from a request body."""
    if content_type != "application/json":
        raise SettingsPatchError(415, "bad_request", f"Content-Type must be application/json, not {content_type!r}")
    try:
        payload = json_decode(body)
    except JsonInputError as exc:
        raise _bad(exc.message, field=exc.field) from None
    if not isinstance(payload, dict):
        raise _bad("request body must be a JSON object of the settings to change")
    expected_version = payload.pop("expected_version", None)
    if expected_version is not None and (
        isinstance(expected_version, bool) or not isinstance(expected_version, int) or not 0 <= expected_version < 2**31
    ):
        raise _bad("'expected_version' must be an integer from 0 to 2147483647")
    changes: dict[str, Any] = {}
    for name, value in payload.items():
        if name in _GROUPS:
            changes.update(_group(name, value))
        else:
            changes[name] = value
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise _bad(f"unknown setting(s) {', '.join(unknown)}; editable: {', '.join(EDITABLE_FIELDS)}")
    if not changes:
        raise _bad("nothing to change: name at least one setting")
    for name, value in changes.items():
        _check_type(name, value)
    return changes, expected_version


def _group(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"'{name}' must be an object of backend -> value")
    unknown = sorted(set(value) - set(BACKENDS))
    if unknown:
        raise _bad(f"'{name}' names unknown backend(s) {', '.join(unknown)}; backends: {', '.join(BACKENDS)}")
    return {_GROUPS[name] + backend: number for backend, number in value.items()}


def _check_type(name: str, value: Any) -> None:
    """JSON types as strict as the fields: a form would read "5" or true as numbers."""
    field = ConcurrencySettings._meta.get_field(name)
    if isinstance(field, models.BooleanField):
        if not isinstance(value, bool):
            raise _bad(f"'{name}' must be true or false", fields={name: ["must be true or false"]})
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"'{name}' must be a number", fields={name: ["must be a number"]})
    elif isinstance(field, models.IntegerField) and not float(value).is_integer():
        raise _bad(f"'{name}' must be a whole number", fields={name: ["must be a whole number"]})


def settings_patch_apply(changes: dict[str, Any], *, expected_version: int | None, user: Any) -> ConcurrencySettings:
    """Validate the changed settings with the console's form (the unchanged ones as they are) and save them."""
    row = concurrency_settings_get()
    data: dict[str, Any] = {name: getattr(row, name) for name in EDITABLE_FIELDS}
    data.update(changes)
    data["expected_version"] = expected_version if expected_version is not None else row.version
    if data["priority_enabled"] is False:
        del data["priority_enabled"]  # an unchecked checkbox is an absent field
    form = ConcurrencySettingsForm(data, instance=row)
    if not form.is_valid():
        fields = {name: [str(m) for m in messages] for name, messages in form.errors.items()}
        raise _bad("invalid settings: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items()), fields=fields)
    try:
        return concurrency_settings_update(
            user=user,
            expected_version=form.cleaned_data["expected_version"],
            **{name: form.cleaned_data[name] for name in changes},
        )
    except ValidationError as exc:
        if exc.code == "stale":
            raise SettingsPatchError(409, "conflict", " ".join(exc.messages)) from None
        raise _bad("invalid settings: " + " ".join(exc.messages)) from None
