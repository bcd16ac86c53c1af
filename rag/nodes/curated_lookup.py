"""curated_lookup: answer with the curated answer staff approved for a question close enough to this one.

Curated answers are the only answers not drawn from retrieved passages: staff wrote or approved them. A match is
the semantic cache's (embedding above a threshold, then the cache's false-hit guard), looked up for context-free
questions only, as the cache's are. On a hit the answer (with its source link) becomes the ready answer
`cache_response` streams (`cache_hit`), and `curated_hit` says it is a curated one: the run's summary marks it
`curated` and the chat records it so. The answers themselves live behind `deps.curated`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.rules.answers import sources_block
from rag.semcache.context import lookup_allowed
from rag.state import CuratedHit, PipelineState, Source

logger = logging.getLogger(__name__)

NAME = "curated_lookup"
INPUTS = ("normalized_question", "language", "history", "summary")
OUTPUTS = ("curated_hit", "cache_hit")
ROUTE_HIT = "hit"
ROUTE_MISS = "miss"


class CuratedMatchLike(Protocol):
    curated_id: str
    score: float
    language: str
    answer: str
    sources: list[dict[str, Any]]


class CuratedLookupSource(Protocol):
    async def lookup(self, question: str, *, language: str) -> CuratedMatchLike | None: ...


class CuratedLookup:
    name = NAME

    def __init__(self, *, curated: CuratedLookupSource | None, timeout: float) -> None:
        self._curated = curated
        self._timeout = timeout

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        state.curated_hit = None
        state.cache_hit = None
        if self._curated is None:
            return ROUTE_MISS
        if not lookup_allowed(state.normalized_question, history=state.history, summary=state.summary):
            return ROUTE_MISS
        try:
            match = await asyncio.wait_for(
                self._curated.lookup(state.normalized_question, language=state.language), self._timeout
            )
        except Exception:
            logger.warning("curated answers lookup failed; answering without them", exc_info=True)
            return ROUTE_MISS
        if match is None or not match.answer.strip():
            return ROUTE_MISS
        sources = [Source.from_dict(raw, ref=i) for i, raw in enumerate(match.sources, start=1)]
        text = match.answer.strip()
        if sources:
            text = f"{text}\n\n{sources_block(sources, match.language)}"
        state.curated_hit = CuratedHit(curated_id=match.curated_id, score=match.score)
        state.cache_hit = {"answer": text, "sources": [source.as_dict() for source in sources]}
        return ROUTE_HIT


def _build(deps: PipelineDeps, params: dict[str, Any]) -> CuratedLookup:
    return CuratedLookup(curated=deps.curated, timeout=params["timeout"])


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Answers with a curated answer staff approved when the question is close enough to its question "
        "(the semantic cache's match and false-hit guard); context-free questions only.",
        "zh-hant": "問題與人員核准的精選回答之問題夠接近時（與語意快取相同的比對與誤中防護），以精選回答作答；"
        "僅限與上下文無關的問題。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    routes=(ROUTE_HIT, ROUTE_MISS),
    params={
        "timeout": ParamSpec(
            "float", 1.0, "Seconds to wait for the curated answers before answering without them", 0.05
        )
    },
)
