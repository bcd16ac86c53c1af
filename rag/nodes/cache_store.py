"""cache_store: keep a grounded answer to a context-free question for the next person who asks it.

cache_lookup decided whether the question may be cached at all (`cacheable`). Asked mid-conversation, the answer
is kept only when the pipeline did not use the conversation to understand or answer it (rag.semcache.context):
the planner did not read it as a follow-up, every search query is made of the question's own terms (no rewrite
from the history), and no model that reads the recent turns wrote the answer (`answer_saw_history`: with an LLM,
response_synth sends them).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.semcache.context import store_allowed
from rag.state import PipelineState

logger = logging.getLogger(__name__)

NAME = "cache_store"
INPUTS = ("cacheable", "normalized_question", "language", "answer", "producer")
# see response_synth.OPTIONAL_INPUTS
OPTIONAL_INPUTS = (
    "sources",
    "retrieval_verdict",
    "history",
    "summary",
    "intent",
    "followup_instruction",
    "search_query",
    "queries",
    "degraded",
    "retrieval_fallback",
)
OUTPUTS = ()


class SemanticCacheStore(Protocol):
    async def store(
        self, question: str, *, language: str, answer: str, sources: list[dict[str, Any]], producer: str
    ) -> None: ...


class CacheStore:
    name = NAME

    def __init__(self, *, cache: SemanticCacheStore | None, timeout: float, answer_saw_history: bool = False) -> None:
        if cache is not None and not callable(getattr(cache, "store", None)):
            raise TypeError("cache_store: deps.cache has no async store(question, *, language, answer, sources)")
        self._cache = cache
        self._timeout = timeout
        self._answer_saw_history = answer_saw_history

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        if self._cache is None:
            return None
        # Only answers grounded in retrieved articles are worth repeating; apologies and follow-ups are not.
        if not state.cacheable or state.error or state.retrieval_verdict != "relevant" or not state.sources:
            return None
        if state.degraded or state.retrieval_fallback:
            return None  # a stand-in (for the model's answer, or the dense search): the next asker gets the real one
        if not store_allowed(
            state.normalized_question,
            history=state.history,
            summary=state.summary,
            intent=state.intent,
            followup_instruction=state.followup_instruction,
            queries=(state.search_query, *state.queries),
            answer_saw_history=self._answer_saw_history,
        ):
            return None
        try:
            await asyncio.wait_for(
                self._cache.store(
                    state.normalized_question,
                    language=state.language,
                    answer=state.answer,
                    sources=[s.as_dict() for s in state.sources],
                    producer=state.producer,
                ),
                self._timeout,
            )
        except Exception:
            logger.warning("semantic cache store failed; the answer was still sent", exc_info=True)
        return None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> CacheStore:
    # With an LLM the answer is written with the recent turns in view (response_synth), so mid-conversation
    # answers are not kept even for questions that stand on their own.
    return CacheStore(cache=deps.cache, timeout=params["timeout"], answer_saw_history=deps.llm is not None)


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Stores a grounded answer to a context-free question in the semantic cache; never one the "
        "conversation helped to understand or write.",
        "zh-hant": "將與上下文無關、且有資料來源的回答存入語意快取；借助對話內容理解或撰寫的回答一律不存。",
    },
    inputs=INPUTS,
    optional_inputs=OPTIONAL_INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={"timeout": ParamSpec("float", 2.0, "Seconds to wait for the cache to store an answer", 0.05)},
)
