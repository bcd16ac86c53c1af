"""cache_response: stream a cached answer and its sources, as if it had just been written.

The answer is whole already, so it goes out in large deltas (`chunk_chars`, a paragraph or so each) rather than the
few characters a generated answer streams in: every delta is one event through the stream relay and one frame on
the socket, and on a hit that per-event work is most of what the client waits for.
"""

from __future__ import annotations

from typing import Any

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.nodes._streaming import stream_text
from rag.state import PipelineState, Source

NAME = "cache_response"
INPUTS = ("cache_hit",)
OUTPUTS = ("answer", "sources")


class CacheResponse:
    name = NAME

    def __init__(self, *, stream_chunk_chars: int = 240) -> None:
        self._chunk_chars = stream_chunk_chars

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        entry = state.cache_hit or {}
        answer = str(entry.get("answer") or "")
        state.sources = [Source.from_dict(raw, ref=i) for i, raw in enumerate(entry.get("sources") or [], start=1)]
        state.answer = answer
        await stream_text(writer, self.name, answer, chunk_chars=self._chunk_chars)
        return None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> CacheResponse:
    return CacheResponse(stream_chunk_chars=params["chunk_chars"])


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Streams the cached answer with its sources.",
        "zh-hant": "以串流方式送出快取中的回答與資料來源。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={
        "chunk_chars": ParamSpec(
            "int", 240, "Characters per answer delta of a cached answer", minimum=1, maximum=100_000
        ),
    },
)
