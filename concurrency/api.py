"""Staff-only JSON APIs of the LLM concurrency state.

Sync views on purpose: under ASGI Django runs them in a worker thread, so the ORM and Redis reads never block
the event loop. Access: a staff session, or ``Authorization: Bearer <CONCURRENCY_API_TOKEN>`` when that
setting is non-empty, or ``Authorization: Bearer <API key>`` of a key with the ``admin-read`` scope (the check
is handed over by the app that owns the keys, through ``bearer_key_checker_set``: this package knows nothing of
it). ``PATCH /settings`` takes the ``admin-write`` scope or a staff user who may change the settings. Anyone else
gets 403 JSON (never a login redirect: these are for scripts too).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from concurrency.jsonio import json_error
from concurrency.selectors import (
    concurrency_priority,
    concurrency_settings_snapshot,
    concurrency_status,
    concurrency_summary,
    settings_snapshot_of,
)
from concurrency.settings_patch import SettingsPatchError, settings_patch_apply, settings_patch_parse

__all__ = [
    "api_access_allowed",
    "bearer_key_checker_set",
    "caller_allowed",
    "priority",
    "settings_view",
    "status",
    "summary",
]

SCOPE_READ = "admin-read"
SCOPE_WRITE = "admin-write"

# Whether an Authorization header carries an API key with a scope: (authorization=..., scope=...) -> bool.
BearerKeyChecker = Callable[..., bool]
_key_checkers: list[BearerKeyChecker] = []


def bearer_key_checker_set(checker: BearerKeyChecker | None) -> None:
    """Let API keys in: called once where the project is assembled (an AppConfig.ready); None removes it."""
    _key_checkers.clear()
    if checker is not None:
        _key_checkers.append(checker)


def api_access_allowed(*, user: Any, authorization: str, token: str, scope: str = SCOPE_READ) -> bool:
    """Whether a caller may use the concurrency APIs: an active staff user, the bearer ``token`` (only when
    ``token`` is non-empty; compared in constant time), or an API key with ``scope``."""
    if user is not None and getattr(user, "is_active", False) and getattr(user, "is_staff", False):
        return True
    if _token_matches(authorization, token):
        return True
    return any(checker(authorization=authorization, scope=scope) for checker in _key_checkers)


def _token_matches(authorization: str, token: str) -> bool:
    if not token:
        return False
    scheme, _, supplied = authorization.strip().partition(" ")
    supplied = supplied.strip()
    if scheme.lower() != "bearer" or not supplied:
        return False
    return hmac.compare_digest(supplied.encode(), token.encode())


def _staff_or_token(
    scope: str = SCOPE_READ,
) -> Callable[[Callable[[HttpRequest], HttpResponse]], Callable[[HttpRequest], HttpResponse]]:
    def decorate(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
        @wraps(view)
        def checked(request: HttpRequest) -> HttpResponse:
            if not caller_allowed(request, scope):
                return json_error(403, "forbidden", f"staff session or an API key with the '{scope}' scope required")
            return view(request)

        return checked

    return decorate


def caller_allowed(request: HttpRequest, scope: str) -> bool:
    """The access rule of these APIs for one request. Writing (``admin-write``) takes a staff user allowed to
    change the settings, or a key with that scope; the shared ``CONCURRENCY_API_TOKEN`` only reads."""
    user = getattr(request, "user", None)
    authorization = request.headers.get("Authorization", "")
    if scope == SCOPE_READ:
        return api_access_allowed(user=user, authorization=authorization, token=settings.CONCURRENCY_API_TOKEN)
    if _is_staff(user) and user is not None and user.has_perm("concurrency.change_concurrencysettings"):
        return True
    return any(checker(authorization=authorization, scope=scope) for checker in _key_checkers)


def _is_staff(user: Any) -> bool:
    return user is not None and getattr(user, "is_active", False) and getattr(user, "is_staff", False)


@never_cache
@_staff_or_token()
@require_GET
def status(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_status())


@never_cache
@_staff_or_token()
@require_GET
def summary(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_summary())


@never_cache
@_staff_or_token()
@require_GET
def priority(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_priority())


# A PATCH is a JSON body sent with a key or a session: a browser cannot send one cross-site without a CORS preflight,
# which this server never answers, so no CSRF token is needed (and scripts have none).
@csrf_exempt
@never_cache
@require_http_methods(["GET", "PATCH"])
def settings_view(request: HttpRequest) -> HttpResponse:
    """``GET``: the settings row (``admin-read``). ``PATCH``: change some of them (``admin-write``), validated as
    the console's form validates them; every worker applies the change within a second."""
    if request.method == "GET":
        if not caller_allowed(request, SCOPE_READ):
            return json_error(403, "forbidden", "staff session or an API key with the 'admin-read' scope required")
        return JsonResponse({"settings": concurrency_settings_snapshot().to_dict()})
    if not caller_allowed(request, SCOPE_WRITE):
        return json_error(403, "forbidden", "a staff user who may change the settings, or an 'admin-write' API key")
    try:
        changes, expected_version = settings_patch_parse(request.content_type or "", request.body)
        user = request.user if _is_staff(getattr(request, "user", None)) else None
        row = settings_patch_apply(changes, expected_version=expected_version, user=user)
    except SettingsPatchError as exc:
        return json_error(exc.status, exc.code, exc.message, **exc.extra)
    return JsonResponse({"settings": settings_snapshot_of(row).to_dict()})
