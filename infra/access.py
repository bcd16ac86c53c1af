"""Who may call the staff JSON APIs: the one access check of every one of them (concurrency, index jobs, workflows).

A caller gets in by one of three credentials, as the API's `Policy` allows:

- a staff session (an active staff user, with a permission when the rule names one), CSRF-checked on unsafe
  methods, since a browser sends the session cookie on its own;
- ``Authorization: Bearer <CONCURRENCY_API_TOKEN>`` when that setting is non-empty (compared in constant time);
- ``Authorization: Bearer <API key>`` of a key with the rule's scope. The keys live in the chatbot layer, which
  hands its check over through `bearer_key_checker_set` when the project is assembled: this package knows
  nothing of it (layers: chatbot -> rag -> concurrency -> infra).

A bearer credential is never sent by a browser on its own, so it needs no CSRF token. Anyone else gets a 403 in
the project's JSON error shape, never a login redirect: these APIs are for scripts too.
"""

from __future__ import annotations

import functools
import hmac
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from infra.jsonio import json_error

__all__ = [
    "SCOPE_READ",
    "SCOPE_WRITE",
    "Policy",
    "Rule",
    "access_refusal",
    "bearer_key_allows",
    "bearer_key_checker_set",
    "bearer_token_matches",
    "is_staff",
    "staff_api",
]

SCOPE_READ = "admin-read"
SCOPE_WRITE = "admin-write"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_REFUSAL = "CSRF check failed: send the csrftoken cookie and X-CSRFToken header"

# Whether an Authorization header carries an API key with a scope: (authorization=..., scope=...) -> bool.
BearerKeyChecker = Callable[..., bool]
_key_checkers: list[BearerKeyChecker] = []


@dataclass(frozen=True)
class Rule:
    """The credentials one kind of call accepts. A staff session always counts (with `permission` when set);
    `token` lets the shared CONCURRENCY_API_TOKEN in, `key_scope` an API key with that scope."""

    refusal: str
    token: bool = False
    key_scope: str | None = None
    permission: str | None = None


@dataclass(frozen=True)
class Policy:
    """The rule for reading (safe methods) and, when it differs, the rule for changing (unsafe methods)."""

    read: Rule
    write: Rule | None = None

    def rule_for(self, method: str | None) -> Rule:
        if method in SAFE_METHODS or self.write is None:
            return self.read
        return self.write


def bearer_key_checker_set(checker: BearerKeyChecker | None) -> None:
    """Let API keys in: called once where the project is assembled (an AppConfig.ready); None removes it."""
    _key_checkers.clear()
    if checker is not None:
        _key_checkers.append(checker)


def bearer_key_allows(authorization: str, scope: str) -> bool:
    return any(checker(authorization=authorization, scope=scope) for checker in _key_checkers)


def bearer_token_matches(authorization: str, token: str) -> bool:
    """Whether the header is ``Bearer <token>``; an empty `token` (the setting unset) never matches."""
    if not token:
        return False
    scheme, _, supplied = authorization.strip().partition(" ")
    supplied = supplied.strip()
    if scheme.lower() != "bearer" or not supplied:
        return False
    return hmac.compare_digest(supplied.encode(), token.encode())


def is_staff(user: Any) -> bool:
    return bool(user is not None and getattr(user, "is_active", False) and getattr(user, "is_staff", False))


def _csrf_failed(request: HttpRequest) -> bool:
    # The stubs want a view; Django reads only its `csrf_exempt` attribute, and no view means not exempt.
    middleware = CsrfViewMiddleware(lambda _request: HttpResponse())
    return middleware.process_view(request, None, (), {}) is not None  # type: ignore[arg-type]


def access_refusal(request: HttpRequest, policy: Policy) -> JsonResponse | None:
    """None when the caller may make this request, else the 403 to answer. Sync: the session, the user's
    permissions and the key check read the database (async views call it through `staff_api`)."""
    rule = policy.rule_for(request.method)
    authorization = request.headers.get("Authorization", "")
    if rule.token and bearer_token_matches(authorization, settings.CONCURRENCY_API_TOKEN):
        return None
    if rule.key_scope is not None and authorization and bearer_key_allows(authorization, rule.key_scope):
        return None
    user = getattr(request, "user", None)
    if not is_staff(user):
        return json_error(403, "forbidden", rule.refusal)
    if rule.permission is not None and not user.has_perm(rule.permission):  # type: ignore[union-attr]
        return json_error(403, "forbidden", f"you lack the permission '{rule.permission}'")
    if request.method not in SAFE_METHODS and _csrf_failed(request):
        return json_error(403, "forbidden", CSRF_REFUSAL)
    return None


def staff_api(policy: Policy) -> Callable[[Any], Any]:
    """Decorator for sync and async views: answer `access_refusal`'s 403, else call the view. The view is
    CSRF-exempt for Django's middleware because this check does CSRF itself, for sessions only."""

    def decorate(view: Any) -> Any:
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def checked_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                refusal = await sync_to_async(access_refusal)(request, policy)
                if refusal is not None:
                    return refusal
                return await view(request, *args, **kwargs)

            return csrf_exempt(checked_async)

        @functools.wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            refusal = access_refusal(request, policy)
            if refusal is not None:
                return refusal
            return view(request, *args, **kwargs)

        return csrf_exempt(checked)

    return decorate
