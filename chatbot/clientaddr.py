"""Where a request comes from: the client's address behind trusted proxies, and whether it sent a client id.

Behind a proxy the peer of every connection is the proxy; the client's address is in `X-Forwarded-For`, where each
proxy appends the address it received the request from. Only the entries appended by our own proxies can be
trusted (a client can send any `X-Forwarded-For` it likes), so with `RAG_TRUSTED_PROXY_HOPS=N` the client is the
N-th entry from the right, as Werkzeug's ProxyFix reads it; with 0 the header is ignored and the peer is the client.

`ClientOriginMiddleware` sets the ASGI scope's `client` to that address (so Django's `REMOTE_ADDR` agrees) and
makes a `ClientOrigin` current for the connection, which `chatbot.streaming` hands to the pipeline for its rate
limits.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.http.cookie import parse_cookie

from chatbot.security import CLIENT_COOKIE, CLIENT_HEADER, client_hex_valid, header_value

__all__ = ["ClientOrigin", "ClientOriginMiddleware", "client_address", "client_origin_var"]


@dataclass(frozen=True, slots=True)
class ClientOrigin:
    address: str  # "" when unknown (a Unix socket, a test communicator)
    identified: bool  # the request carried a well-formed client id (cookie or X-Client-Id)


client_origin_var: ContextVar[ClientOrigin | None] = ContextVar("client_origin", default=None)


def _valid_ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip().strip("[]")))
    except ValueError:
        return ""


def client_address(scope: Mapping[str, Any], trusted_hops: int) -> str:
    """The client's address for an ASGI http or websocket scope ("" when there is none)."""
    peer = scope.get("client") or None
    peer_address = _valid_ip(str(peer[0])) if peer else ""
    if trusted_hops <= 0:
        return peer_address
    chain: list[str] = []
    for name, value in scope.get("headers") or []:
        if name.lower() == b"x-forwarded-for":
            chain += [entry.strip() for entry in value.decode("latin-1").split(",") if entry.strip()]
    if len(chain) < trusted_hops:
        # Fewer entries than trusted proxies: the request did not come through all of them.
        return peer_address
    return _valid_ip(chain[-trusted_hops]) or peer_address


def _identified(scope: Mapping[str, Any]) -> bool:
    headers = scope.get("headers") or []
    cookie = parse_cookie(header_value(headers, "cookie") or "").get(CLIENT_COOKIE)
    return client_hex_valid(cookie) or client_hex_valid(header_value(headers, CLIENT_HEADER))


ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class ClientOriginMiddleware:
    def __init__(self, app: Any, *, trusted_hops: int) -> None:
        self.app = app
        self.trusted_hops = trusted_hops

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        address = client_address(scope, self.trusted_hops)
        peer = scope.get("client")
        if address and (not peer or peer[0] != address):
            scope = {**scope, "client": (address, peer[1] if peer else 0)}
        token = client_origin_var.set(ClientOrigin(address=address, identified=_identified(scope)))
        try:
            await self.app(scope, receive, send)
        finally:
            client_origin_var.reset(token)
