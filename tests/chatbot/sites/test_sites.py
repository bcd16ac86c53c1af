"""Embedding websites: who may call the chat APIs from another origin, how often, and the widget's files."""

from __future__ import annotations

import gzip
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from chatbot.sites.models import Site
from chatbot.sites.origins import origin_normalise, origins_parse
from chatbot.sites.selectors import memory
from chatbot.sites.views import widget_bundle
from tests.chatbot.helpers import (
    JSON_CONTENT,
    STREAM_CHAT,
    WebsocketCommunicator,
    application,
    ask_body,
    sse_request,
    ws_events,
)

pytestmark = pytest.mark.django_db(transaction=True)

ALLOWED = "https://www.example.edu"
OTHER = "https://evil.example"
WIDGET_BUDGET_GZIP = 40 * 1024


@pytest.fixture(autouse=True)
def fresh_sites():
    memory.drop()
    yield
    memory.drop()


def add_site(*args: str) -> str:
    out = StringIO()
    call_command("sites", "add", "--name", "Example University", "--origin", ALLOWED, *args, stdout=out)
    return out.getvalue().strip()


async def _add_site(*args: str) -> str:
    from asgiref.sync import sync_to_async

    return await sync_to_async(add_site)(*args)


async def options_from(origin: str) -> Any:
    headers = [(b"origin", origin.encode()), (b"access-control-request-method", b"POST")]
    return await sse_request(STREAM_CHAT, b"", method="OPTIONS", headers=headers)


def test_origins_are_normalised_and_non_origins_refused_by_name() -> None:
    assert origin_normalise("HTTPS://WWW.Example.edu:443/") == "https://www.example.edu"
    assert origin_normalise("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    for bad in ("https://*.example.edu", "https://example.edu/help", "null", "ftp://example.edu", "example.edu"):
        assert origin_normalise(bad) == ""
    with pytest.raises(ValueError, match=r"'example\.edu/x' is not an origin"):
        origins_parse(["https://ok.example", "example.edu/x"])


def test_sites_add_prints_the_key_and_refuses_a_bad_origin() -> None:
    key = add_site("--origin", "http://localhost:8080")
    site = Site.objects.get(key=key)
    assert key.startswith("site_") and site.origins.splitlines() == [ALLOWED, "http://localhost:8080"]
    with pytest.raises(CommandError, match="is not an origin"):
        call_command("sites", "add", "--name", "x", "--origin", "*", stdout=StringIO())


async def test_an_allowed_origin_gets_its_preflight_and_a_streamed_answer_with_cors() -> None:
    await _add_site()
    preflight = await sse_request(
        STREAM_CHAT,
        b"",
        method="OPTIONS",
        headers=[(b"origin", ALLOWED.encode()), (b"access-control-request-method", b"POST")],
    )
    assert preflight.status == 204
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "x-client-id" in preflight.headers["access-control-allow-headers"]
    answer = await sse_request(
        STREAM_CHAT, ask_body("How do I reset my password?"), headers=[JSON_CONTENT, (b"origin", ALLOWED.encode())]
    )
    assert answer.status == 200 and answer.headers["access-control-allow-origin"] == ALLOWED
    events = answer.events()
    assert events[-1]["channel"] == "meta_summary" and events[-1]["sources"]


async def test_any_other_origin_is_refused_in_the_json_error_shape_and_gets_no_answer() -> None:
    await _add_site()
    for method in ("OPTIONS", "POST"):
        response = await sse_request(
            STREAM_CHAT, ask_body("How do I reset my password?"), method=method,
            headers=[JSON_CONTENT, (b"origin", OTHER.encode())],
        )  # fmt: skip
        assert response.status == 403
        error = response.json()["error"]
        assert error["code"] == "forbidden" and f"the origin {OTHER} is not allowed" in error["message"]
        assert response.headers["access-control-allow-origin"] == OTHER  # so the widget can read why


async def test_a_switched_off_site_is_refused_within_the_check_interval() -> None:
    from asgiref.sync import sync_to_async

    key = await _add_site()
    assert (
        await sse_request(STREAM_CHAT, b"", method="OPTIONS", headers=[(b"origin", ALLOWED.encode())])
    ).status == 204
    site = await Site.objects.aget(key=key)
    site.enabled = False
    from chatbot.sites.services import site_save

    await sync_to_async(site_save)(site=site)
    assert (
        await sse_request(STREAM_CHAT, b"", method="OPTIONS", headers=[(b"origin", ALLOWED.encode())])
    ).status == 403


async def test_a_sites_daily_limit_refuses_the_next_question_with_busy() -> None:
    await _add_site("--daily-limit", "1")
    headers = [JSON_CONTENT, (b"origin", ALLOWED.encode())]
    first = await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"), headers=headers)
    assert first.status == 200
    second = await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"), headers=headers)
    assert second.status == 429 and second.json()["error"]["code"] == "busy"
    assert int(second.headers["retry-after"]) > 3600
    # A preflight is not a question.
    assert (await sse_request(STREAM_CHAT, b"", method="OPTIONS", headers=headers)).status == 204


async def test_the_websocket_accepts_an_allowed_origin_and_refuses_another() -> None:
    await _add_site()
    client = "0123456789ab4def8123456789abcdef"
    allowed = WebsocketCommunicator(
        application(), f"/ws/chat/?client={client}", headers=[(b"host", b"localhost"), (b"origin", ALLOWED.encode())]
    )
    connected, _ = await allowed.connect()
    assert connected
    await allowed.send_json_to({"type": "ask", "question": "How do I reset my password?"})
    events = await ws_events(allowed)
    assert events[-1]["channel"] == "meta_summary"
    await allowed.disconnect()
    other = WebsocketCommunicator(
        application(), "/ws/chat/", headers=[(b"host", b"localhost"), (b"origin", OTHER.encode())]
    )
    connected, _ = await other.connect()
    assert not connected


def test_the_iframe_page_is_framable_by_the_sites_origins_only() -> None:
    key = add_site()
    response = Client().get(f"/embed/{key}")
    assert response.status_code == 200
    assert "X-Frame-Options" not in response.headers
    policy = response.headers["Content-Security-Policy"]
    assert re.search(r"frame-ancestors 'self' https://www\.example\.edu(;|$)", policy)
    # Every other page stays unframable.
    assert Client().get("/").headers["X-Frame-Options"] == "DENY"


def test_the_widget_config_is_only_for_the_sites_own_origins() -> None:
    key = add_site()
    Client().get("/")  # nothing needed: the config below reads the branding itself
    ok = Client().get(f"/api/v1/widget/{key}", HTTP_ORIGIN=ALLOWED)
    assert ok.status_code == 200
    config: dict[str, Any] = ok.json()
    assert config["site"] == key and config["language"] == "zh-hant" and config["paths"]["ws"] == "/ws/chat/"
    assert Client().get("/api/v1/widget/site_nope").json()["error"]["code"] == "not_found"


def test_the_widget_script_fits_its_budget_and_names_no_other_server() -> None:
    bundle = widget_bundle()
    size = len(gzip.compress(bundle, compresslevel=9))
    assert size < WIDGET_BUDGET_GZIP, f"widget.js is {size} bytes gzipped, over the {WIDGET_BUDGET_GZIP} budget"
    code = re.sub(rb"^\s*//.*$", b"", bundle, flags=re.M)  # comments may cite examples
    assert re.findall(rb"https?://[a-z0-9.-]+", code) == [], "the widget may talk only to the server it came from"
    assert b"/*CSS*/" not in bundle and b"/*MARKDOWN*/" not in bundle
    response = Client().get("/widget.js")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/javascript")
    assert response["Cross-Origin-Resource-Policy"] == "cross-origin"
