"""The ASGI application the browser tests serve: the project's own, with answer deltas slowed down on request.

A test that must act while an answer is still streaming (stop it, cut the connection, leave the page) sets the
cookie `hc_test_answer_delay` (seconds per answer delta) in its browser context (`tests.browser.conftest`,
`slow_answers`); every other page gets answers at full speed. The cookie is read only here, by the test server's
own application, so production code has no test switch. `HC_TEST_ANSWER_DELAY` is the delay of requests without
the cookie (default 0).
"""

from __future__ import annotations

import asyncio
import os
from contextvars import ContextVar
from http.cookies import CookieError, SimpleCookie
from typing import Any

from chatbot.asgi import application as project_application
from rag.events import StreamWriter

COOKIE = "hc_test_answer_delay"
_default = float(os.environ.get("HC_TEST_ANSWER_DELAY", "0") or 0)
# Set for each connection; the pipeline's task, created while the connection is handled, inherits it.
_delay: ContextVar[float] = ContextVar("hc_test_answer_delay", default=_default)
_real_answer = StreamWriter.answer


async def _slow_answer(self: StreamWriter, node: str, delta: str) -> None:
    delay = _delay.get()
    if delay > 0:
        await asyncio.sleep(delay)
    await _real_answer(self, node, delta)


StreamWriter.answer = _slow_answer  # type: ignore[method-assign]


def _cookie_delay(scope: dict[str, Any]) -> float | None:
    for name, value in scope.get("headers") or []:
        if name.lower() == b"cookie":
            try:
                morsel = SimpleCookie(value.decode("latin-1")).get(COOKIE)
            except CookieError:
                return None
            if morsel is not None:
                try:
                    return max(0.0, float(morsel.value))
                except ValueError:
                    return None
    return None


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    delay = _cookie_delay(scope) if scope.get("type") in ("http", "websocket") else None
    token = _delay.set(_default if delay is None else delay)
    try:
        await project_application(scope, receive, send)
    finally:
        _delay.reset(token)
