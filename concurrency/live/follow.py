"""Following the settings row through the change feed: a saved change is applied by every worker within a second.

A save publishes `SETTINGS_TOPIC` after its commit (concurrency.services); each worker's change feed watcher
(infra.changefeed) then runs `settings_follow`, which reads the row on a thread and applies it on the loop when its
version differs from the one applied here. The database is the authority: a differing version is applied even if
it is lower (a restore).
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from .apply import bind_loop, settings_apply, settings_current
from .snapshot import SettingsSnapshot

__all__ = ["SETTINGS_TOPIC", "live_settings_enabled", "live_settings_preload", "settings_follow"]

logger = logging.getLogger(__name__)

SETTINGS_TOPIC = "concurrency.settings"


def live_settings_enabled() -> bool:
    """``settings.CONCURRENCY_LIVE_SETTINGS`` (default on): tests of other apps that drive the ASGI application
    through communicators may turn following the settings (and publishing the stats) off."""
    return bool(getattr(settings, "CONCURRENCY_LIVE_SETTINGS", True))


def _db_read(known_version: int | None) -> SettingsSnapshot | None:
    """On a thread: the row as a snapshot if its version differs from ``known_version``."""
    # in the function: the models it reads are not ready when this package is first imported
    from concurrency.live.stored import concurrency_settings_snapshot, concurrency_settings_version

    close_old_connections()
    try:
        if known_version is not None and concurrency_settings_version() == known_version:
            return None
        return concurrency_settings_snapshot()
    finally:
        close_old_connections()


async def settings_follow(topic: str = SETTINGS_TOPIC) -> bool:
    """The change feed's handler: apply the stored row here if its version moved; True when it did.

    Runs on the serving loop, which it binds as the one whose thread may touch the manager (a save made in a sync
    view's thread is handed over to it)."""
    bind_loop(asyncio.get_running_loop())
    current = settings_current()
    snapshot = await asyncio.to_thread(_db_read, None if current is None else current.version)
    return snapshot is not None and settings_apply(snapshot, force=True)


def live_settings_preload() -> bool:
    """At server start-up, from sync code, before the first connection starts the watcher: apply the stored row,
    so the first requests already run on it (limits, policy, sample rate) rather than on the environment's
    seeds. One query; False (the seeds stay until the watcher reads the row) when the database cannot answer yet.
    """
    if settings_current() is not None:
        return False
    try:
        snapshot = _db_read(None)
    except DatabaseError as exc:
        logger.warning("live settings: the settings row is unreadable at start-up (%s); the seeds stay for now", exc)
        return False
    return snapshot is not None and settings_apply(snapshot)
