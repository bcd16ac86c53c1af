"""The checks every chat entry point makes: client ids, the client cookie, the JSON content type."""

from __future__ import annotations

import io
import uuid
from http.cookies import SimpleCookie

import pytest
from django.test import RequestFactory

from chatbot import security

HEX = uuid.uuid4().hex


def scope_with(*headers: tuple[bytes, bytes]) -> dict:
    return {"type": "http", "headers": list(headers)}


def test_client_id_comes_from_the_cookie() -> None:
    client_id, is_new = security.client_id_from_scope(scope_with((b"cookie", f"a=1; hc_client={HEX}".encode())))
    assert (client_id, is_new) == (f"anon:{HEX}", False)


def test_client_id_comes_from_the_header_without_a_cookie() -> None:
    client_id, is_new = security.client_id_from_scope(scope_with((b"x-client-id", HEX.upper().encode())))
    assert (client_id, is_new) == (f"anon:{HEX}", False)


def test_the_cookie_wins_over_the_header() -> None:
    other = uuid.uuid4().hex
    scope = scope_with((b"x-client-id", other.encode()), (b"cookie", f"hc_client={HEX}".encode()))
    assert security.client_id_from_scope(scope) == (f"anon:{HEX}", False)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "abc",
        "anon:" + HEX,
        str(uuid.uuid4()),  # dashed form
        uuid.uuid1().hex,  # not version 4
        HEX + "0",
        "../../etc/passwd",
        "0" * 32,
    ],
)
def test_anything_but_a_uuid4_hex_gets_a_new_id(value: str) -> None:
    client_id, is_new = security.client_id_from_scope(
        scope_with((b"cookie", f"hc_client={value}".encode()), (b"x-client-id", value.encode()))
    )
    assert is_new
    assert client_id.startswith("anon:") and client_id != f"anon:{value}"
    assert security.client_hex_valid(client_id.removeprefix("anon:"))


def test_no_headers_gets_a_new_id_each_time() -> None:
    first, first_new = security.client_id_from_scope({"type": "websocket"})
    second, _ = security.client_id_from_scope({"type": "websocket"})
    assert first_new and first != second


def test_requests_use_the_same_rule() -> None:
    request = RequestFactory().get("/", HTTP_COOKIE=f"hc_client={HEX}")
    assert security.client_from_request(request) == (f"anon:{HEX}", HEX, False)
    request = RequestFactory().get("/", HTTP_X_CLIENT_ID="nope")
    client_id, client_hex, is_new = security.client_from_request(request)
    assert is_new and client_id == f"anon:{client_hex}"


def test_cookie_header_is_httponly_lax_and_site_wide() -> None:
    value = security.client_cookie_header(HEX)
    cookie = SimpleCookie()
    cookie.load(value)
    morsel = cookie["hc_client"]
    assert morsel.value == HEX
    assert morsel["path"] == "/"
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Lax"
    assert not morsel["secure"]
    assert int(morsel["max-age"]) > 30 * 24 * 3600
    assert "Secure" in security.client_cookie_header(HEX, secure=True)


@pytest.mark.parametrize("value", [b"application/json", b"Application/JSON; charset=utf-8"])
def test_json_content_type_is_accepted(value: bytes) -> None:
    security.require_json_content_type([(b"content-type", value)])


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"content-type", b"text/plain")],
        [(b"content-type", b"application/x-www-form-urlencoded")],
        [(b"content-type", b"multipart/form-data; boundary=x")],
        [(b"content-type", b"application/jsonp")],
    ],
)
def test_anything_else_is_refused_naming_what_was_sent(headers: list) -> None:
    with pytest.raises(security.UnsupportedContentType, match="Content-Type must be application/json"):
        security.require_json_content_type(headers)


def test_the_lockouts_address_is_the_one_the_middleware_resolved_never_the_header_again(settings) -> None:
    request = RequestFactory().get("/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
    for proxy_header in (None, ("HTTP_X_FORWARDED_PROTO", "https")):
        settings.SECURE_PROXY_SSL_HEADER = proxy_header
        assert security.client_ip_address(request) == "127.0.0.1"  # REMOTE_ADDR: the middleware's answer


async def test_behind_two_proxies_the_lockout_and_the_rate_limits_see_the_same_client(settings) -> None:
    """Through ClientOriginMiddleware with RAG_TRUSTED_PROXY_HOPS=2, as the ASGI app is served behind the TLS
    proxy: the address the admin's lockout reads is the visitor's, not the outer proxy's."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    from django.core.handlers.asgi import ASGIRequest

    from chatbot.clientaddr import ClientOriginMiddleware, client_origin_var

    seen: dict[str, object] = {}

    async def app(scope: dict, receive: object, send: object) -> None:
        request = ASGIRequest(scope, io.BytesIO())
        origin = client_origin_var.get()
        seen.update(lockout=security.client_ip_address(request), limits=origin.address if origin else None)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/admin/login/",
        "query_string": b"",
        "client": ("10.0.0.2", 5000),  # the nearer proxy
        # the visitor's own claim, the visitor as the outer proxy saw it, the outer proxy as the inner one saw it
        "headers": [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.9, 10.0.0.1")],
    }
    await ClientOriginMiddleware(app, trusted_hops=2)(scope, None, None)
    assert seen == {"lockout": "203.0.113.9", "limits": "203.0.113.9"}
