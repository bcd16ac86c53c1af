"""Which ASGI application serves which connection. Import after Django is set up (the consumers use models)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.urls import path, re_path

from chatbot import security
from chatbot.clientaddr import ClientOriginMiddleware
from chatbot.consumers import AskStreamConsumer, ChatConsumer, StreamCancelConsumer, StreamResumeConsumer
from chatbot.daphne_options import websocket_close_frames_on_protocol_errors
from chatbot.openai_api.consumers import ChatCompletionsConsumer, ModelsConsumer
from chatbot.sites.access import SiteCors
from chatbot.sites.selectors import asite_for_origin

ASK_STREAM_PATHS = {
    "api/v1/rag/ask/stream": "responses",
    "api/v1/rag/ask/stream_chat": "chat",
}


def sse_path_for_backend(backend: str) -> str:
    """The endpoint of a backend, e.g. for the `ask` command's HTTP mode."""
    return next("/" + route for route, name in ASK_STREAM_PATHS.items() if name == backend)


class HostChecked:
    """An HTTP consumer behind Django's Host check: a Host outside ALLOWED_HOSTS is a 400 (DNS rebinding, poisoned
    absolute URLs), as Django's own views answer it; here in the one JSON error shape."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if security.scope_host(scope) is not None:
            await self.app(scope, receive, send)
            return
        error = {"code": "bad_request", "message": "the Host header is not one this server answers to"}
        await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps({"error": error}).encode()})


class OriginChecked:
    """A WebSocket handshake is accepted from this site's own origin (`security.websocket_origin_allowed`) and from
    the origins of an enabled embedding site (admin: Websites), whose site rides in the scope (`embed_site`) for
    its limits."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if security.websocket_origin_allowed(scope):
            await self.app(scope, receive, send)
            return
        origin = security.header_value(scope.get("headers") or [], "origin")
        site = await asite_for_origin(origin) if origin and security.scope_host(scope) else None
        if site is not None:
            await self.app({**scope, "embed_site": site, "headers": _client_header_from_query(scope)}, receive, send)
        else:
            await WebsocketDenier()(scope, receive, send)


def _client_header_from_query(scope: Any) -> list[tuple[bytes, bytes]]:
    """A browser cannot set headers on a WebSocket and sends no cookie to another site: the widget names its
    visitor with `?client=<id>`, which becomes the `X-Client-Id` every other transport reads."""
    headers = list(scope.get("headers") or [])
    values = parse_qs((scope.get("query_string") or b"").decode("latin-1")).get("client", [])
    if values and security.client_hex_valid(values[0]):
        headers.append((security.CLIENT_HEADER.encode("latin-1"), values[0].encode("latin-1")))
    return headers


# Channels routes ASGI applications through django.urls.path, as its documentation does; the stubs cannot say so
# (django-stubs types path() for Django views only, and types-channels wants a URL pattern type that no function
# returns), hence the `type: ignore`s on the routes below.
websocket_urlpatterns = [path("ws/chat/", ChatConsumer.as_asgi())]  # type: ignore[arg-type]


def build_application(django_app: Any) -> ClientOriginMiddleware:
    """SSE endpoints to their consumer, other HTTP to Django, WebSocket behind the Origin check; every connection
    first gets its client's address (behind `RAG_TRUSTED_PROXY_HOPS` proxies)."""
    websocket_close_frames_on_protocol_errors()
    http_routes = [
        # The widget's calls from an allowed website's pages: CORS and the site's limits (chatbot.sites.access).
        *(
            path(route, HostChecked(SiteCors(AskStreamConsumer.as_asgi(backend=backend), counts=True)))  # type: ignore[arg-type]
            for route, backend in ASK_STREAM_PATHS.items()
        ),
        # Resume an answer after Last-Event-ID, and stop one (for either backend: request ids are global).
        path(
            "api/v1/rag/ask/stream/<str:request_id>",
            HostChecked(SiteCors(StreamResumeConsumer.as_asgi(), methods="GET")),  # type: ignore[arg-type]
        ),
        path(
            "api/v1/rag/ask/stream/<str:request_id>/cancel",
            HostChecked(SiteCors(StreamCancelConsumer.as_asgi())),  # type: ignore[arg-type]
        ),
        path("api/v1/rag/feedback", SiteCors(django_app)),  # type: ignore[arg-type]
        re_path(r"^api/v1/chat/conversations/", SiteCors(django_app, methods="GET")),  # type: ignore[arg-type]
        re_path(r"^api/v1/widget/", SiteCors(django_app, methods="GET")),  # type: ignore[arg-type]
        # The OpenAI-compatible API (chatbot.openai_api): base URL http://<host>/v1 for any OpenAI client.
        path("v1/chat/completions", HostChecked(ChatCompletionsConsumer.as_asgi())),  # type: ignore[arg-type]
        path("v1/models", HostChecked(ModelsConsumer.as_asgi())),  # type: ignore[arg-type]
        path("v1/models/<str:model>", HostChecked(ModelsConsumer.as_asgi())),  # type: ignore[arg-type]
    ]
    router = ProtocolTypeRouter(
        {
            "http": URLRouter([*http_routes, re_path(r"", django_app)]),  # type: ignore[list-item]
            # Browsers send Origin on every WebSocket handshake and never enforce same-origin for it themselves:
            # without this check any site could open a socket with the visitor's cookie (cross-site WebSocket
            # hijacking). The origin must be this site's own: scheme, host (one of ALLOWED_HOSTS) and port.
            "websocket": OriginChecked(URLRouter(websocket_urlpatterns)),  # type: ignore[arg-type]
        }
    )
    return ClientOriginMiddleware(router, trusted_hops=settings.RAG_TRUSTED_PROXY_HOPS)
