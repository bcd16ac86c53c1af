"""How long staff keep what a visitor deleted, and the job that purges it after.

A visitor deleting a conversation hides it from them at once (chatbot.services.conversation_delete); staff keep
it, with its messages and their feedback, for CONVERSATION_RETENTION_DAYS after the deletion, and then it is gone
for good: `conversations_purge` deletes it, run hourly by every worker (`retention_task`: a delete is harmless to
repeat, and whichever worker gets there first does the work) and by `manage.py purge_conversations`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from chatbot.models import Conversation
from infra.worker_tasks import WorkerTask

logger = logging.getLogger(__name__)

PURGE_INTERVAL = 3600.0


def conversations_purge(*, retention_days: int, now: datetime | None = None) -> int:
    """Delete the conversations their visitors deleted more than `retention_days` ago (with their messages and
    feedback); how many went. Sync ORM."""
    cutoff = (now or timezone.now()) - timedelta(days=retention_days)
    _deleted, by_model = Conversation.objects.filter(hidden_at__isnull=False, hidden_at__lt=cutoff).delete()
    purged = by_model.get(Conversation._meta.label, 0)
    if purged:
        logger.info("retention: purged %d conversations deleted by their visitors before %s", purged, cutoff)
    return purged


def _purge_now() -> int:
    try:
        return conversations_purge(retention_days=settings.CONVERSATION_RETENTION_DAYS)
    finally:
        close_old_connections()


class RetentionPurge:
    """The scheduled purge: once at the worker's start, then every `interval` seconds, off the event loop."""

    def __init__(self, *, interval: float = PURGE_INTERVAL) -> None:
        self.interval = interval
        self.runs = 0

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(_purge_now)
                self.runs += 1
            except Exception:
                logger.exception("retention: the purge failed; trying again in %gs", self.interval)
            await asyncio.sleep(self.interval)


def retention_enabled() -> bool:
    return bool(getattr(settings, "CONVERSATION_RETENTION_PURGE", True))


retention_task: WorkerTask[RetentionPurge] = WorkerTask(
    "conversation-retention", RetentionPurge, restart_delay=60.0, stop_timeout=5.0, enabled=retention_enabled
)
