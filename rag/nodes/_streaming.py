"""Streaming a finished text as answer deltas, for the nodes that own the answer channel."""

from __future__ import annotations

import asyncio

from rag.events import StreamWriter

# Yield to the event loop every so many deltas: `writer.answer` only waits when the channel is full, so without
# this a long answer would go out in one burst while every other request on the loop waits.
_YIELD_EVERY = 8


async def stream_text(writer: StreamWriter, node: str, text: str, *, chunk_chars: int) -> None:
    step = max(1, chunk_chars)
    for count, start in enumerate(range(0, len(text), step), start=1):
        await writer.answer(node, text[start : start + step])
        if count % _YIELD_EVERY == 0:
            await asyncio.sleep(0)
