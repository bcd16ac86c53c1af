"""Keeping the content gaps up to date: every worker takes in new gap questions every `interval` seconds (the
watermarks' row lock lets one at a time do it; the others find nothing new), with this worker's embedder. The
gaps API and the summary also take them in before they answer, so what they show is never older than a request."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.conf import settings

from chatbot.gaps import gaps_update
from infra.worker_tasks import WorkerTask
from rag.provider import get_runtime

logger = logging.getLogger(__name__)


async def gaps_refresh() -> int:
    """Take in the gap questions logged since the last update, with this worker's embedder."""
    deps = await get_runtime().deps()
    embedder = deps.retriever.embedder
    return await sync_to_async(gaps_update)(embed=embedder.embed_documents, dim=int(embedder.dim))


class GapsRefresh:
    def __init__(self) -> None:
        self.interval = float(settings.CONTENT_GAPS_UPDATE_SECONDS)
        self.runs = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await gaps_refresh()
                self.runs += 1
            except Exception:
                logger.exception("content gaps: the update failed; trying again in %gs", self.interval)


def gaps_refresh_enabled() -> bool:
    return float(getattr(settings, "CONTENT_GAPS_UPDATE_SECONDS", 0)) > 0


gaps_refresh_task: WorkerTask[GapsRefresh] = WorkerTask(
    "content-gaps", GapsRefresh, restart_delay=30.0, stop_timeout=5.0, enabled=gaps_refresh_enabled
)
