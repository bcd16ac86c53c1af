"""ASGI wrapper that starts the live-settings task on the first connection of any kind.

Daphne does not speak the ASGI lifespan protocol, so the first scope is the earliest moment we run on the
server's loop. Under a server that does send lifespan (uvicorn), the task starts at startup, stops at
shutdown, and the lifespan scope is answered here (Channels' ProtocolTypeRouter has no route for it).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from .runner import live_settings_start, live_settings_stop

__all__ = ["LiveSettingsMiddleware"]

logger = logging.getLogger(__name__)


class LiveSettingsMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if _enabled():
            live_settings_start()
        await self.app(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if _enabled():
                    live_settings_start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await live_settings_stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _enabled() -> bool:
    """``settings.CONCURRENCY_LIVE_SETTINGS`` (default on): tests of other apps that drive the ASGI application
    through communicators may turn the background task off."""
    return bool(getattr(settings, "CONCURRENCY_LIVE_SETTINGS", True))
