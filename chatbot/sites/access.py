"""Who may call the chat APIs from another website, and how often.

A request from the assistant's own pages (no `Origin`, or this server's own) is not this module's business.
A request from another origin is served only when that origin belongs to an enabled site (admin: Websites):
its preflight is answered, its responses carry `Access-Control-Allow-Origin` for it, and its questions count
against the site's per-day and per-visitor limits, in the rate windows every worker shares
(infra.ratelimit, in Redis with REDIS_URL). Any other origin gets a 403 in the project's JSON error shape, readable
by the page that asked (so the widget can say why), and no answer.

The widget sends no cookie (a third-party cookie would be blocked anyway): the visitor is known by the
`X-Client-Id` it keeps in the host page's storage, or by the address when it sends none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from chatbot import security
from chatbot.clientaddr import client_origin_var
from chatbot.sites.selectors import EmbedSite, asite_for_origin
from concurrency.live import redis_config
from infra.ratelimit import RateLimiter, RateRule, rate_limiter_for

DAY = 24 * 3600.0
ALLOWED_HEADERS = b"content-type, last-event-id, x-client-id"
EXPOSED_HEADERS = b"retry-after"
PREFLIGHT_MAX_AGE = b"600"

_limiter: RateLimiter | None = None


def site_limiter() -> RateLimiter:
    """The rate windows of site limits: shared by every worker in Redis (REDIS_URL), else this process's."""
    global _limiter
    if _limiter is None:
        url, prefix = redis_config()
        _limiter = rate_limiter_for(url, prefix=prefix)
    return _limiter


def site_rules(site: EmbedSite, visitor: str) -> list[RateRule]:
    return [
        RateRule(f"site:{site.key}:day", site.daily_limit, window=DAY),
        RateRule(f"site:{site.key}:visitor:{visitor}", site.visitor_daily_limit, window=DAY),
    ]


def visitor_of(scope: Any) -> str:
    """The visitor a site's limit counts: its client id when it sends a valid one, else its address."""
    header = security.header_value(scope.get("headers") or [], security.CLIENT_HEADER)
    if header and security.client_hex_valid(header):
        return "client:" + header.strip().lower()
    origin = client_origin_var.get()
    address = origin.address if origin is not None else (scope.get("client") or ["?"])[0]
    return f"address:{address}"


async def site_admit(site: EmbedSite, visitor: str) -> tuple[bool, float]:
    """(allowed, retry_after) for one more question from `visitor` on `site`; counted only when allowed."""
    return await site_limiter().admit(site_rules(site, visitor))


def limit_message(retry_after: float) -> str:
    hours = max(1, math.ceil(retry_after / 3600))
    return f"this website's questions for today are used up; try again in about {hours} h"


def refusal_message(origin: str) -> str:
    return (
        f"the origin {origin} is not allowed to use this assistant: staff add it to a website's allowed origins "
        "in the admin (Websites)"
    )


def cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", EXPOSED_HEADERS),
        (b"vary", b"Origin"),
    ]


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]]) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"), *headers]}
    )
    await send({"type": "http.response.body", "body": json.dumps(body, ensure_ascii=False).encode()})


class SiteCors:
    """Wraps an HTTP endpoint the widget calls. `counts` marks the endpoint that asks a question (the limits)."""

    def __init__(self, app: Any, *, methods: str = "POST", counts: bool = False) -> None:
        self.app = app
        self.methods = f"{methods}, OPTIONS".encode("ascii")
        self.counts = counts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        origin = security.header_value(scope.get("headers") or [], "origin")
        if not origin or security.websocket_origin_allowed(scope):
            await self.app(scope, receive, send)
            return
        site = await asite_for_origin(origin)
        headers = cors_headers(origin)
        if site is None:
            refused = {"code": "forbidden", "message": refusal_message(origin)}
            await _send_json(send, 403, {"error": refused}, headers)
            return
        if scope.get("method") == "OPTIONS":
            preflight = [
                (b"access-control-allow-methods", self.methods),
                (b"access-control-allow-headers", ALLOWED_HEADERS),
                (b"access-control-max-age", PREFLIGHT_MAX_AGE),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": [*headers, *preflight]})
            await send({"type": "http.response.body", "body": b""})
            return
        if self.counts and scope.get("method") == "POST":
            allowed, retry_after = await site_admit(site, visitor_of(scope))
            if not allowed:
                wait = max(1, math.ceil(retry_after))
                error: dict[str, object] = {"code": "busy", "message": limit_message(wait), "retry_after": wait}
                await _send_json(send, 429, {"error": error}, [*headers, (b"retry-after", str(wait).encode())])
                return

        async def send_with_cors(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *headers]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def frame_ancestors_for(site: EmbedSite | None) -> list[str]:
    """The `frame-ancestors` of the iframe page: the site's origins (none: only this server's own pages)."""
    return ["'self'", *site.origins] if site is not None else ["'self'"]
