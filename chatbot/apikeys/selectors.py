"""Reads: which key a request carries, and whether it may do what it asks (sync; call via a thread)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from chatbot.apikeys.models import SCOPES, ApiKey

__all__ = [
    "CheckedKey",
    "KeyRefused",
    "api_key_check",
    "api_key_hash",
    "api_key_list",
    "bearer_secret",
]


class KeyRefused(Exception):
    """A request the key does not authorise: `status` 401 (no key, unknown, revoked, expired) or 403 (scope)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class CheckedKey:
    id: int
    prefix: str
    name: str
    rate_limit_per_minute: int

    @property
    def client_id(self) -> str:
        return f"apikey:{self.prefix}"


def api_key_hash(secret: str) -> str:
    # A key is 240 random bits: a fast hash is enough (nothing to brute-force), and it makes the lookup one index.
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def bearer_secret(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` header ("" when there is none)."""
    scheme, _, supplied = authorization.strip().partition(" ")
    return supplied.strip() if scheme.lower() == "bearer" else ""


def _shown(secret: str) -> str:
    return (secret[:8] + "…") if len(secret) > 8 else "…"


def api_key_check(*, secret: str, scope: str) -> CheckedKey:
    """The key whose secret this is, if it may be used for `scope` now; KeyRefused otherwise. One indexed query."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    if not secret:
        raise KeyRefused(
            401, "missing_api_key", "no API key: send it as 'Authorization: Bearer <key>' (manage.py apikey create)"
        )
    key = (
        ApiKey.objects.filter(key_hash=api_key_hash(secret))
        .only("id", "prefix", "name", "scopes", "rate_limit_per_minute", "expires_at", "revoked_at")
        .first()
    )
    if key is None:
        raise KeyRefused(401, "invalid_api_key", f"incorrect API key provided: {_shown(secret)}")
    if key.revoked_at is not None:
        raise KeyRefused(401, "invalid_api_key", f"API key {key.prefix}… was revoked")
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise KeyRefused(401, "invalid_api_key", f"API key {key.prefix}… expired at {key.expires_at.isoformat()}")
    if scope not in (key.scopes or []):
        raise KeyRefused(403, "insufficient_scope", f"API key {key.prefix}… does not have the '{scope}' scope")
    return CheckedKey(id=key.pk, prefix=key.prefix, name=key.name, rate_limit_per_minute=key.rate_limit_per_minute)


def api_key_list(*, include_revoked: bool = True) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.select_related("owner").order_by("-created_at")
    return keys if include_revoked else keys.filter(revoked_at__isnull=True)
