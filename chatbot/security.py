"""Checks every chat entry point makes: who the anonymous client is, and what a request body may be.

An anonymous browser (or the `ask` command) is known by a random uuid4 hex kept in the `hc_client` cookie or
sent as an `X-Client-Id` header; it only decides which conversations a client may list and continue, so it is
an unguessable bearer token, not an identity. Anything that is not a well-formed uuid4 hex is ignored and a
new id is made, so a client can never choose someone else's id by sending a short or structured value.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.http.request import split_domain_port, validate_host

CLIENT_COOKIE = "hc_client"
CLIENT_HEADER = "x-client-id"
CLIENT_PREFIX = "anon:"
# A year: the id only links a browser to its own conversations; a cleared cookie just starts afresh.
CLIENT_COOKIE_MAX_AGE = 365 * 24 * 3600

_UUID4_HEX = re.compile(r"^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$")

Headers = Iterable[tuple[bytes, bytes]]


class UnsupportedContentType(ValueError):
    """The request body is not declared as JSON; the message says what was sent."""


def client_hex_valid(value: str | None) -> bool:
    return value is not None and _UUID4_HEX.match(value.strip().lower()) is not None


def client_id_from_values(*, cookie: str | None, header: str | None) -> tuple[str, str, bool]:
    """(client_id, hex, is_new) from a cookie value and a header value; the cookie wins when both are valid."""
    for candidate in (cookie, header):
        if candidate and client_hex_valid(candidate):
            hex_ = candidate.strip().lower()
            return CLIENT_PREFIX + hex_, hex_, False
    hex_ = uuid.uuid4().hex
    return CLIENT_PREFIX + hex_, hex_, True


def header_value(headers: Headers, name: str) -> str | None:
    """The first value of header `name` (lower case) from ASGI headers, decoded as latin-1 like HTTP does."""
    wanted = name.lower().encode("latin-1")
    for key, value in headers:
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


def client_from_scope(scope: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(client_id, hex, is_new) for an ASGI http or websocket scope."""
    headers = scope.get("headers") or []
    cookies = parse_cookie(header_value(headers, "cookie") or "")
    return client_id_from_values(cookie=cookies.get(CLIENT_COOKIE), header=header_value(headers, CLIENT_HEADER))


def client_id_from_scope(scope: Mapping[str, Any]) -> tuple[str, bool]:
    """(client_id, is_new): `anon:<hex>` from the `hc_client` cookie or `X-Client-Id`, else a new one."""
    client_id, _hex, is_new = client_from_scope(scope)
    return client_id, is_new


def client_from_request(request: HttpRequest) -> tuple[str, str, bool]:
    """(client_id, hex, is_new) for a Django request (the views' side of the same rule)."""
    return client_id_from_values(cookie=request.COOKIES.get(CLIENT_COOKIE), header=request.headers.get(CLIENT_HEADER))


def client_hex_of(client_id: str) -> str:
    return client_id.removeprefix(CLIENT_PREFIX)


def client_cookie_header(client_hex: str, *, secure: bool = False) -> str:
    """The `Set-Cookie` value that keeps a client's id: HttpOnly (page scripts never need it), SameSite=Lax."""
    cookie: SimpleCookie = SimpleCookie()
    cookie[CLIENT_COOKIE] = client_hex
    morsel = cookie[CLIENT_COOKIE]
    morsel["path"] = "/"
    morsel["max-age"] = CLIENT_COOKIE_MAX_AGE
    morsel["httponly"] = True
    morsel["samesite"] = "Lax"
    if secure:
        morsel["secure"] = True
    return morsel.OutputString()


def set_client_cookie(response: Any, client_hex: str, *, secure: bool = False) -> None:
    """Django-response side of `client_cookie_header` (same attributes)."""
    response.set_cookie(
        CLIENT_COOKIE,
        client_hex,
        max_age=CLIENT_COOKIE_MAX_AGE,
        path="/",
        httponly=True,
        samesite="Lax",
        secure=secure,
    )


def client_ip_address(request: HttpRequest) -> str | None:
    """The client's address for the admin's lockout (django-axes): `REMOTE_ADDR`, which `ClientOriginMiddleware`
    has already set to the client behind `RAG_TRUSTED_PROXY_HOPS` proxies, the same address every rate limit
    counts. `X-Forwarded-For` is not read again here: its last entry is only the nearest proxy's peer, so behind
    two proxies every visitor would share one lockout."""
    return request.META.get("REMOTE_ADDR")


def scope_is_secure(scope: Mapping[str, Any]) -> bool:
    """https/wss, from the scope or, behind the TLS proxy (DJANGO_BEHIND_TLS_PROXY), from X-Forwarded-Proto."""
    if scope.get("scheme") in ("https", "wss"):
        return True
    if not settings.SECURE_PROXY_SSL_HEADER:
        return False
    proto = header_value(scope.get("headers") or [], "x-forwarded-proto") or ""
    return proto.split(",", 1)[0].strip().lower() == "https"


def scope_host(scope: Mapping[str, Any]) -> str | None:
    """The request's Host when it is one of ALLOWED_HOSTS (lower case, port kept), else None. Django's views
    make this check themselves; the Channels consumers get it here."""
    host = (header_value(scope.get("headers") or [], "host") or "").strip().lower()
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    return host


def _origin_key(url: str) -> tuple[str, str, int] | None:
    parts = urlsplit(url.strip().lower())
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def websocket_origin_allowed(scope: Mapping[str, Any]) -> bool:
    """A WebSocket handshake from this site's own pages: its Origin has the scheme, host and port the request
    came to (an allowed Host), or is one of CSRF_TRUSTED_ORIGINS. Browsers always send Origin; no Origin, no
    socket. Comparing host names alone would let any other port of the same host (another app) in."""
    origin = header_value(scope.get("headers") or [], "origin")
    host = scope_host(scope)
    if not origin or host is None:
        return False
    wanted = _origin_key(origin)
    if wanted is None:
        return False
    own = _origin_key(f"{'https' if scope_is_secure(scope) else 'http'}://{host}")
    trusted = {_origin_key(value) for value in settings.CSRF_TRUSTED_ORIGINS}
    return wanted == own or wanted in trusted


def require_json_content_type(headers: Headers) -> None:
    """Refuse a body not declared `application/json`.

    Browsers can only send `application/json` cross-site after a CORS preflight, which this server never
    answers; plain HTML forms cannot send it at all. Requiring it therefore closes cross-site POSTs (CSRF)
    for the streaming endpoints without a token.
    """
    value = header_value(headers, "content-type")
    media_type = (value or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        shown = value if value else "nothing"
        raise UnsupportedContentType(f"Content-Type must be application/json, not {shown}")
