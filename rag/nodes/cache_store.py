"""cache_store: keep a grounded answer to a context-free question for the next person who asks it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.state import PipelineState

logger = logging.getLogger(__name__)

NAME = "cache_store"
INPUTS = ("cacheable", "normalized_question", "language", "answer")
OPTIONAL_INPUTS = ("sources", "retrieval_verdict")  # see response_synth.OPTIONAL_INPUTS
OUTPUTS = ()


class SemanticCacheStore(Protocol):
    async def store(self, question: str, *, language: str, answer: str, sources: list[dict[str, Any]]) -> None: ...


class CacheStore:
    name = NAME

    def __init__(self, *, cache: SemanticCacheStore | None, timeout: float) -> None:
        if cache is not None and not callable(getattr(cache, "store", None)):
            raise TypeError("cache_store: deps.cache has no async store(question, *, language, answer, sources)")
        self._cache = cache
        self._timeout = timeout

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        if self._cache is None:
            return None
        # Only answers grounded in retrieved articles are worth repeating; apologies and follow-ups are not.
        if not state.cacheable or state.error or state.retrieval_verdict != "relevant" or not state.sources:
            return None
        try:
            await asyncio.wait_for(
                self._cache.store(
                    state.normalized_question,
                    language=state.language,
                    answer=state.answer,
                    sources=[s.as_dict() for s in state.sources],
                ),
                self._timeout,
            )
        except Exception:
            logger.warning("semantic cache store failed; the answer was still sent", exc_info=True)
        return None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> CacheStore:
    return CacheStore(cache=deps.cache, timeout=params["timeout"])


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Stores a grounded answer to a context-free question in the semantic cache.",
        "zh-hant": "將與上下文無關、且有資料來源的回答存入語意快取。",
    },
    inputs=INPUTS,
    optional_inputs=OPTIONAL_INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={"timeout": ParamSpec("float", 2.0, "Seconds to wait for the cache to store an answer", 0.05)},
)
