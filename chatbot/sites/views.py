"""The widget's three HTTP faces: the script (`/widget.js`), its configuration for one site, and the iframe page.

The configuration is answered only to the site's own origins (chatbot.sites.access.SiteCors answers CORS and
refuses other origins before this view runs; here the key must also belong to the origin that asks).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_safe

from chatbot.sites.access import frame_ancestors_for
from chatbot.sites.origins import origin_normalise
from chatbot.sites.selectors import EmbedSite, site_by_key
from infra.jsonio import json_error
from rag.branding.selectors import organisation_get

STATIC = Path(settings.BASE_DIR) / "static"


def widget_bundle() -> bytes:
    """widget.js with its stylesheet and the chat page's markdown renderer put in (one request, no globals)."""
    script = (STATIC / "widget" / "widget.js").read_text(encoding="utf-8")
    css = (STATIC / "widget" / "widget.css").read_text(encoding="utf-8").replace("\\", "\\\\").replace("`", "\\`")
    markdown = (STATIC / "chat" / "markdown.js").read_text(encoding="utf-8").replace('"use strict";', "")
    return script.replace("/*CSS*/", css, 1).replace("/*MARKDOWN*/", markdown, 1).encode("utf-8")


@require_safe
def widget_js(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(widget_bundle(), content_type="text/javascript; charset=utf-8")
    # Short: a new version reaches the sites' visitors within minutes.
    response["Cache-Control"] = "public, max-age=300"
    response["Cross-Origin-Resource-Policy"] = "cross-origin"
    return response


def _site_config(site: EmbedSite) -> dict[str, object]:
    organisation = organisation_get().page_config()
    texts = organisation["texts"]
    assert isinstance(texts, dict)
    for words in texts.values():
        if site.greeting:
            words["welcome"] = site.greeting
        if site.suggestions:
            words["suggestions"] = list(site.suggestions)
    return {
        "site": site.key,
        "name": site.name,
        "language": site.default_language,
        "color": site.color or organisation["color"],
        "position": site.position,
        "organisation": organisation,
        "maxQuestionChars": settings.RAG_MAX_QUESTION_CHARS,
        "paths": {
            "ws": "/ws/chat/",
            "sse": "/api/v1/rag/ask/stream_chat",
            "stream": "/api/v1/rag/ask/stream/",
            "feedback": "/api/v1/rag/feedback",
            "conversations": "/api/v1/chat/conversations/",
        },
    }


@require_safe
def widget_config(request: HttpRequest, key: str) -> HttpResponse:
    site = site_by_key(key)
    if site is None:
        return json_error(404, "not_found", f"no website with the key {key!r} is switched on")
    origin = request.headers.get("Origin")
    if origin and origin_normalise(origin) not in site.origins and not _own_origin(request, origin):
        return json_error(403, "forbidden", f"the origin {origin} is not one of the website {site.name!r}")
    response = JsonResponse(_site_config(site))
    response["Cache-Control"] = "no-store"
    return response


def _own_origin(request: HttpRequest, origin: str) -> bool:
    return origin_normalise(origin) == origin_normalise(request.build_absolute_uri("/"))


@require_safe
@xframe_options_exempt
def embed_page(request: HttpRequest, key: str) -> HttpResponse:
    """The iframe mode: the widget's panel as a whole page, framable by the site's origins only."""
    site = site_by_key(key)
    if site is None:
        raise Http404("no such website")
    response = render(request, "chat/embed.html", {"site": site, "organisation": organisation_get()})
    response._csp_replace = {"frame-ancestors": frame_ancestors_for(site)}  # type: ignore[attr-defined]
    return response
