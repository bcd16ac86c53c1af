"""cache_lookup: answer a context-free question from the semantic cache when a close enough one was answered.

Only context-free questions are looked up (and later stored): "How much?" or "學生呢？" mean something different
in every conversation. Without a conversation a question is context-free (unless it reads as a follow-up);
mid-conversation it is looked up only when it stands on its own by a conservative test
(rag.semcache.context). `cacheable` carries the verdict to cache_store. The cache itself (embedding,
threshold, expiry) lives behind `deps.cache`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.semcache.context import lookup_allowed
from rag.state import PipelineState

logger = logging.getLogger(__name__)

NAME = "cache_lookup"
INPUTS = ("normalized_question", "language", "history", "summary", "producer")
OUTPUTS = ("cacheable", "cache_hit")
ROUTE_HIT = "hit"
ROUTE_MISS = "miss"


class SemanticCacheLookup(Protocol):
    async def lookup(self, question: str, *, language: str, producer: str) -> dict[str, Any] | None:
        """The cached entry {"answer": str, "sources": [source dicts]} for a close enough question, or None."""
        ...


class CacheLookup:
    name = NAME

    def __init__(self, *, cache: SemanticCacheLookup | None, timeout: float) -> None:
        if cache is not None and not callable(getattr(cache, "lookup", None)):
            raise TypeError("cache_lookup: deps.cache has no async lookup(question, *, language) method")
        self._cache = cache
        self._timeout = timeout

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        state.cacheable = lookup_allowed(state.normalized_question, history=state.history, summary=state.summary)
        if self._cache is None or not state.cacheable:
            return ROUTE_MISS
        try:
            entry = await asyncio.wait_for(
                self._cache.lookup(state.normalized_question, language=state.language, producer=state.producer),
                self._timeout,
            )
        except Exception:
            # The cache is an optimisation: when it is slow or down the question is answered the long way.
            logger.warning("semantic cache lookup failed; answering without it", exc_info=True)
            return ROUTE_MISS
        if not entry or not isinstance(entry.get("answer"), str) or not entry["answer"]:
            return ROUTE_MISS
        state.cache_hit = entry
        return ROUTE_HIT


def _build(deps: PipelineDeps, params: dict[str, Any]) -> CacheLookup:
    return CacheLookup(cache=deps.cache, timeout=params["timeout"])


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Looks a context-free question up in the semantic cache; follow-ups, and questions asked "
        "mid-conversation that do not stand on their own, are never cached.",
        "zh-hant": "在語意快取中查詢與上下文無關的問題；追問，以及對話中無法單獨理解的問題，一律不使用快取。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    routes=(ROUTE_HIT, ROUTE_MISS),
    params={"timeout": ParamSpec("float", 1.0, "Seconds to wait for the cache before answering without it", 0.05)},
)
