"""The client's address behind trusted proxies, and the origin the pipeline's rate limits see."""

from __future__ import annotations

from typing import Any

from chatbot.clientaddr import ClientOrigin, ClientOriginMiddleware, client_address, client_origin_var

CLIENT_HEX = "0123456789ab4def8123456789abcdef"


def scope(peer: str = "10.0.0.5", forwarded: tuple[str, ...] = (), cookie: str = "") -> dict[str, Any]:
    headers = [(b"x-forwarded-for", value.encode()) for value in forwarded]
    if cookie:
        headers.append((b"cookie", f"hc_client={cookie}".encode()))
    return {"type": "http", "client": (peer, 51000), "headers": headers}


def test_without_trusted_proxies_the_peer_is_the_client_whatever_it_forwards() -> None:
    assert client_address(scope(forwarded=("203.0.113.7",)), 0) == "10.0.0.5"


def test_one_trusted_proxy_gives_the_address_it_appended_not_what_the_client_claimed() -> None:
    assert client_address(scope(forwarded=("203.0.113.7",)), 1) == "203.0.113.7"
    # a client that sends its own X-Forwarded-For only adds entries to the left of the proxy's
    assert client_address(scope(forwarded=("1.2.3.4, 203.0.113.7",)), 1) == "203.0.113.7"
    # several headers are one list, in order
    assert client_address(scope(forwarded=("1.2.3.4", "203.0.113.7")), 1) == "203.0.113.7"


def test_two_trusted_hops_skip_the_inner_proxy() -> None:
    assert client_address(scope(forwarded=("1.2.3.4, 203.0.113.7, 10.0.0.9",)), 2) == "203.0.113.7"


def test_too_few_entries_or_garbage_fall_back_to_the_peer() -> None:
    assert client_address(scope(forwarded=()), 1) == "10.0.0.5"
    assert client_address(scope(forwarded=("203.0.113.7",)), 2) == "10.0.0.5"
    assert client_address(scope(forwarded=("not-an-address",)), 1) == "10.0.0.5"
    assert client_address({"type": "http", "headers": []}, 0) == ""


async def test_the_middleware_rewrites_the_peer_and_tells_the_connection_who_it_is() -> None:
    seen: list[tuple[Any, ClientOrigin | None]] = []

    async def app(inner: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((inner["client"], client_origin_var.get()))

    middleware = ClientOriginMiddleware(app, trusted_hops=1)
    await middleware(scope(forwarded=("203.0.113.7",)), None, None)
    await middleware(scope(forwarded=("203.0.113.8",), cookie=CLIENT_HEX), None, None)

    assert seen[0] == (("203.0.113.7", 51000), ClientOrigin(address="203.0.113.7", identified=False))
    assert seen[1] == (("203.0.113.8", 51000), ClientOrigin(address="203.0.113.8", identified=True))
    assert client_origin_var.get() is None  # reset after the connection
