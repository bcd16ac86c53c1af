"""Staff-only JSON APIs of the LLM concurrency state.

Sync views on purpose: under ASGI Django runs them in a worker thread, so the ORM and Redis reads never block
the event loop. Access: a staff session, or ``Authorization: Bearer <CONCURRENCY_API_TOKEN>`` when that
setting is non-empty, or ``Authorization: Bearer <API key>`` of a key with the ``admin-read`` scope (the check
is handed over by the app that owns the keys, through ``bearer_key_checker_set``: this package knows nothing of
it). Anyone else gets 403 JSON (never a login redirect: these are for scripts too).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from concurrency.selectors import concurrency_priority, concurrency_status, concurrency_summary

__all__ = ["api_access_allowed", "bearer_key_checker_set", "priority", "status", "summary"]

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


def _staff_or_token(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    @wraps(view)
    def checked(request: HttpRequest) -> HttpResponse:
        allowed = api_access_allowed(
            user=getattr(request, "user", None),
            authorization=request.headers.get("Authorization", ""),
            token=settings.CONCURRENCY_API_TOKEN,
        )
        if not allowed:
            return JsonResponse(
                {"error": "forbidden", "detail": "staff session or a valid API token required"}, status=403
            )
        return view(request)

    return checked


@never_cache
@_staff_or_token
@require_GET
def status(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_status())


@never_cache
@_staff_or_token
@require_GET
def summary(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_summary())


@never_cache
@_staff_or_token
@require_GET
def priority(request: HttpRequest) -> HttpResponse:
    return JsonResponse(concurrency_priority())
