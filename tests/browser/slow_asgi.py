"""The ASGI application the browser tests serve: the project's own, with answer deltas slowed down.

`HC_TEST_ANSWER_DELAY` (seconds, default 0) is read only here, so production code has no test switch: a test
that must act while an answer is still streaming (stop it, cut the connection) gets time to do so.
"""

from __future__ import annotations

import asyncio
import os

from chatbot.asgi import application as project_application
from rag.events import StreamWriter

_delay = float(os.environ.get("HC_TEST_ANSWER_DELAY", "0") or 0)

if _delay > 0:
    _real_answer = StreamWriter.answer

    async def _slow_answer(self: StreamWriter, node: str, delta: str) -> None:
        await asyncio.sleep(_delay)
        await _real_answer(self, node, delta)

    StreamWriter.answer = _slow_answer  # type: ignore[method-assign]

application = project_application
