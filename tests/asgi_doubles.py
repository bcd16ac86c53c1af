"""Connection callables for tests that call an ASGI application directly and expect it not to use them."""

from __future__ import annotations

from typing import Any


async def receive_unused() -> dict[str, Any]:
    raise AssertionError("the application read from a connection this test does not serve")


async def send_unused(message: dict[str, Any]) -> None:
    raise AssertionError(f"the application sent {message.get('type')!r} on a connection this test does not serve")
