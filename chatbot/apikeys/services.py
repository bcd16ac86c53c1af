"""Writes: making, revoking and counting the use of API keys, and each key's rate limit (sync; via a thread).

The rate limit counts in the project's rate windows (infra.ratelimit), as the visitors' and the websites' do."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F
from django.utils import timezone

from chatbot.apikeys.models import SCOPES, ApiKey
from chatbot.apikeys.selectors import CheckedKey, KeyRefused, api_key_check, api_key_hash, bearer_secret
from concurrency.live import redis_config
from infra.ratelimit import RateLimiter, RateRule, rate_limiter_for

__all__ = [
    "KEY_PREFIX",
    "TASK_RATE_FACTOR",
    "CreatedKey",
    "KeyRefused",
    "RateLimited",
    "api_key_admit",
    "api_key_allows_scope",
    "api_key_authorise",
    "api_key_create",
    "api_key_limiter",
    "api_key_rate_check",
    "api_key_revoke",
    "api_key_tokens_add",
    "api_key_used",
    "scopes_clean",
]

KEY_PREFIX = "hc-"
# A chat client's background tasks (titles, tags, follow-ups: `chatbot.openai_api.tasks`) are counted apart from the
# answers, against this many times the key's limit: Open WebUI sends three with a new chat and one with each turn,
# and they must not use up the requests its people ask with.
TASK_RATE_FACTOR = 4
PREFIX_CHARS = 11  # "hc-" and eight characters of the secret: shown in lists, enough to tell keys apart

_limiter: RateLimiter | None = None


class RateLimited(Exception):
    """The key used up its requests for this minute; `retry_after` seconds until the next one."""

    def __init__(self, key: CheckedKey, retry_after: int, *, task: bool = False) -> None:
        if task:
            limit = key.rate_limit_per_minute * TASK_RATE_FACTOR
            what = f"API key {key.prefix}… is limited to {limit} background tasks (titles, tags...) per minute"
        else:
            what = f"API key {key.prefix}… is limited to {key.rate_limit_per_minute} requests per minute"
        super().__init__(what)
        self.retry_after = retry_after
        self.message = str(self)


@dataclass(frozen=True, slots=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once, never stored


def scopes_clean(scopes: Iterable[str]) -> list[str]:
    chosen = [s.strip() for s in scopes if s.strip()]
    unknown = sorted(set(chosen) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; expected any of {', '.join(SCOPES)}")
    if not chosen:
        raise ValueError(f"a key needs at least one scope ({', '.join(SCOPES)})")
    return [s for s in SCOPES if s in chosen]


def api_key_create(
    *,
    name: str,
    owner: Any = None,
    scopes: Iterable[str] = ("chat",),
    rate_limit_per_minute: int = 60,
    expires_at: datetime | None = None,
) -> CreatedKey:
    """A new key; its secret is in the result and nowhere else."""
    if not name.strip():
        raise ValueError("a key needs a name")
    if rate_limit_per_minute < 0:
        raise ValueError("rate_limit_per_minute must be 0 (no limit) or more")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError("expires_at is in the past")
    secret = KEY_PREFIX + secrets.token_urlsafe(30)
    key = ApiKey.objects.create(
        name=name.strip(),
        owner=owner,
        prefix=secret[:PREFIX_CHARS],
        key_hash=api_key_hash(secret),
        scopes=scopes_clean(scopes),
        rate_limit_per_minute=rate_limit_per_minute,
        expires_at=expires_at,
    )
    return CreatedKey(key=key, secret=secret)


def api_key_revoke(*, prefix: str) -> ApiKey:
    """Revoke the key with this prefix (LookupError when there is none). Every worker refuses it from the next
    request on: each request reads the key's row."""
    key = ApiKey.objects.filter(prefix=prefix.rstrip("…")).first()
    if key is None:
        raise LookupError(f"no API key with prefix {prefix!r}")
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def api_key_limiter() -> RateLimiter:
    """The keys' rate windows (infra.ratelimit): shared by every worker in Redis (REDIS_URL), else this process's."""
    global _limiter
    if _limiter is None:
        url, prefix = redis_config()
        _limiter = rate_limiter_for(url, prefix=prefix)
    return _limiter


def api_key_rate_check(key: CheckedKey, *, now: float | None = None, task: bool = False) -> None:
    """Count one request against the key's limit in the last minute (a sliding window); RateLimited past it. A
    client's background task (`task`) counts in a window of its own, against `TASK_RATE_FACTOR` times the limit.
    `now`: the time on the windows' clock (Redis's with REDIS_URL), for tests.

    Called on a thread, beside the key's database read: with Redis one round trip, one count for every worker.
    """
    limit = key.rate_limit_per_minute * (TASK_RATE_FACTOR if task else 1)
    # by the key's prefix, not its id: a database rebuilt (tests, a restore) reuses ids, never random prefixes
    rule = RateRule(f"apikey:{'task:' if task else ''}{key.prefix}", limit)
    allowed, retry_after = api_key_limiter().hit([rule], now=now)
    if not allowed:
        raise RateLimited(key, max(1, math.ceil(retry_after)), task=task)


def api_key_used(*, key_id: int) -> None:
    ApiKey.objects.filter(pk=key_id).update(requests=F("requests") + 1, last_used_at=timezone.now())


def api_key_tokens_add(*, key_id: int, tokens: int, estimated: bool = False) -> None:
    """Add an answer's tokens to the key's counter; ``estimated``: the LLM server reported none of them."""
    if tokens > 0:
        counted = {"estimated_tokens": F("estimated_tokens") + tokens} if estimated else {}
        ApiKey.objects.filter(pk=key_id).update(tokens=F("tokens") + tokens, **counted)


def api_key_authorise(*, authorization: str, scope: str, rate_limited: bool = True, task: bool = False) -> CheckedKey:
    """The one check of a request with a key: known, live, scoped, within its rate limit (unless
    `rate_limited` is False: listing models asks nothing of the LLM; a client's background `task` in its own
    window); then counted. Raises KeyRefused or RateLimited."""
    key = api_key_check(secret=bearer_secret(authorization), scope=scope)
    api_key_admit(key, rate_limited=rate_limited, task=task)
    return key


def api_key_admit(key: CheckedKey, *, rate_limited: bool = True, task: bool = False) -> None:
    """The second half of `api_key_authorise`, for a caller that must read the request before it knows which
    window counts it: the rate limit (RateLimited), then the use counted."""
    if rate_limited:
        api_key_rate_check(key, task=task)
    api_key_used(key_id=key.id)


def api_key_allows_scope(*, authorization: str, scope: str) -> bool:
    """Whether an `Authorization` header carries a usable key with `scope` (the concurrency APIs' check); the use
    is counted on the key. No rate limit: these are operators' scripts, and refusing them would hide an outage."""
    try:
        key = api_key_check(secret=bearer_secret(authorization), scope=scope)
    except KeyRefused:
        return False
    api_key_used(key_id=key.id)
    return True
