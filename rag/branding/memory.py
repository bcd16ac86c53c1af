"""The organisation's words served from memory, refreshed in every worker when staff change them: a
`infra.feedcopy.FeedCopy` on the change feed's "branding" topic, and the pipeline's `OrganisationSource` reading it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from infra.feedcopy import FeedCopy
from rag.branding.texts import Organisation

TOPIC = "branding"


OrganisationMemory = FeedCopy[Organisation]
memory: FeedCopy[Organisation] = FeedCopy(TOPIC)


def generation_bump() -> None:
    memory.bump()


class MemoryOrganisation:
    """The `OrganisationSource` a server's pipeline uses: memory first, a thread hop only after a change."""

    def __init__(self, read: Callable[[], Organisation]) -> None:
        self._read = read

    async def get(self) -> Organisation:
        held = memory.peek()
        if held is not None:
            return held
        return await asyncio.to_thread(memory.load, self._read)
