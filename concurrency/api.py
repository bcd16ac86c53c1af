"""Staff-only JSON APIs of the LLM concurrency state.

Sync views on purpose: under ASGI Django runs them in a worker thread, so the ORM and Redis reads never block
the event loop. Access (checked by `infra.access`): reading takes a staff session, or
``Authorization: Bearer <CONCURRENCY_API_TOKEN>`` when that setting is non-empty, or an API key with the
``admin-read`` scope. ``PATCH /settings`` takes the ``admin-write`` scope or a staff user who may change the
settings (with the CSRF token, as every session write). Anyone else gets 403 JSON.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from concurrency.selectors import (
    concurrency_priority,
    concurrency_settings_snapshot,
    concurrency_status,
    concurrency_summary,
    settings_snapshot_of,
)
from concurrency.settings_patch import SettingsPatchError, settings_patch_apply, settings_patch_parse
from infra.access import SCOPE_READ, SCOPE_WRITE, Policy, Rule, is_staff, staff_api
from infra.jsonio import json_error

__all__ = ["READ", "SETTINGS", "priority", "settings_view", "status", "summary"]

READ = Policy(
    read=Rule(
        refusal=f"staff session or an API key with the '{SCOPE_READ}' scope required", token=True, key_scope=SCOPE_READ
    )
)
# The shared token only reads; writing takes a staff user allowed to change the settings, or a key with that scope.
SETTINGS = Policy(
    read=READ.read,
    write=Rule(
        refusal=f"a staff user who may change the settings, or an '{SCOPE_WRITE}' API key",
        key_scope=SCOPE_WRITE,
        permission="concurrency.change_concurrencysettings",
    ),
)


@never_cache
@staff_api(READ)
@require_GET
def status(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_status())


@never_cache
@staff_api(READ)
@require_GET
def summary(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_summary())


@never_cache
@staff_api(READ)
@require_GET
def priority(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_priority())


@never_cache
@require_http_methods(["GET", "PATCH"])
@staff_api(SETTINGS)
def settings_view(request: HttpRequest) -> HttpResponse:
    """``GET``: the settings row (``admin-read``). ``PATCH``: change some of them (``admin-write``), validated as
    the console's form validates them; every worker applies the change within a second."""
    if request.method == "GET":
        return JsonResponse({"settings": concurrency_settings_snapshot().to_dict()})
    try:
        changes, expected_version = settings_patch_parse(request.content_type or "", request.body)
        user = request.user if is_staff(getattr(request, "user", None)) else None
        row = settings_patch_apply(changes, expected_version=expected_version, user=user)
    except SettingsPatchError as exc:
        return json_error(exc.status, exc.code, exc.message, **exc.extra)
    return JsonResponse({"settings": settings_snapshot_of(row).to_dict()})
