"""tool_executor: run the search queries in parallel and fuse their rankings (Reciprocal Rank Fusion, k=60).

RRF uses ranks, not scores, so lists from different queries (and, later, different retrievers) combine without
calibration; a chunk found by several queries rises. Each chunk keeps the retriever's own best score, which is
what `retrieval_checker` judges: an RRF score says how the lists agree, not how relevant the top chunk is.

Chunks of an article titled (or a section headed) with the user's question, in other words, go first
(`rag.rules.asked`): the question a help article is named after is the one it answers, however many words
another article shares with the question.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from rag.deps import PipelineDeps, ReportingRetriever, Retriever, SearchReport
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.rules.asked import titles_asking
from rag.rules.planner_rules import FORM_INTENTS
from rag.rules.terms import text_terms
from rag.state import PipelineState, RetrievedChunk
from rag.text.language import EN, ZH_HANS, ZH_HANT

logger = logging.getLogger(__name__)

NAME = "tool_executor"
INPUTS = ("queries", "language")
OPTIONAL_INPUTS = ("intent", "loops", "normalized_question")  # see response_synth.OPTIONAL_INPUTS
OUTPUTS = ("retrieved", "tools_used", "retrieval_fallback")
TOOL = "retrieval"
RRF_K = 60
MAX_PARALLEL_QUERIES = 3
_NEAR_DUPLICATE = 0.9  # Jaccard similarity of term sets above which two chunks say the same thing


class ToolExecutor:
    name = NAME

    def __init__(self, *, retriever: Retriever, top_k: int, timeout: float) -> None:
        self._retriever = retriever
        self._top_k = top_k
        self._timeout = timeout
        # Fetch more than we keep from each query so fusion has depth to work with.
        self._per_query = max(2 * top_k, 10)

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        queries = state.queries[:MAX_PARALLEL_QUERIES] or [state.normalized_question]
        # Forms are searched on their own (the planner asked for a file, not an article). The first pass keeps
        # to the question's language; retries search every language, which is one more way to find something.
        kind = "form" if state.intent in FORM_INTENTS else None
        language = _corpus_language(state.language) if state.loops == 0 and kind is None else None
        started = time.perf_counter()
        results = await asyncio.gather(*(self._search(q, language=language, kind=kind) for q in queries))
        ranked = [report.chunks for report in results if report is not None]
        # BM25 alone answered some query (the embedder failed or is resting): the client is told
        state.retrieval_fallback = next((r.fallback for r in results if r is not None and r.fallback), "")
        state.retrieved = fuse(ranked, top_k=self._top_k, lead=titles_asking(state.normalized_question))
        if TOOL not in state.tools_used:
            state.tools_used.append(TOOL)
        await writer.emit(
            self.name,
            "status",
            "tool",
            tool=TOOL,
            queries=queries,
            kind=kind or "any",
            language=language or "any",
            hits=len(state.retrieved),
            failed=len(results) - len(ranked),
            fallback=state.retrieval_fallback,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return None

    async def _search(self, query: str, *, language: str | None, kind: str | None) -> SearchReport | None:
        """One query's hits; None when it timed out or failed (the other queries may still answer)."""
        retriever = self._retriever
        try:
            async with asyncio.timeout(self._timeout):
                if isinstance(retriever, ReportingRetriever):
                    return await retriever.search_report(query, limit=self._per_query, language=language, kind=kind)
                return SearchReport(await retriever.search(query, limit=self._per_query, language=language, kind=kind))
        except TimeoutError:
            logger.warning("retrieval timed out after %.1f s; skipping one query", self._timeout)
        except Exception:
            # A broken store must not crash the request: it gets the honest "not found" answer instead, and the
            # operator gets the traceback.
            logger.exception("retrieval failed; skipping one query")
        return None


def _corpus_language(language: str) -> str | None:
    if language in (ZH_HANT, ZH_HANS):
        return ZH_HANT  # Simplified questions were normalised to Traditional, the corpus script
    return EN if language == EN else None


def fuse(
    ranked_lists: list[list[RetrievedChunk]],
    *,
    top_k: int,
    k: int = RRF_K,
    lead: Callable[[RetrievedChunk], bool] | None = None,
) -> list[RetrievedChunk]:
    """Reciprocal Rank Fusion over ranked lists, deduplicated by chunk id and near-identical text; the chunks
    `lead` picks (among all fused, not only the top k) go first, each group in fused order."""
    fused: dict[str, float] = {}
    best: dict[str, RetrievedChunk] = {}
    for hits in ranked_lists:
        for rank, chunk in enumerate(hits, start=1):
            fused[chunk.chunk_id] = fused.get(chunk.chunk_id, 0.0) + 1.0 / (k + rank)
            kept = best.get(chunk.chunk_id)
            if kept is None or chunk.score > kept.score:
                best[chunk.chunk_id] = chunk
    order = sorted(fused, key=lambda chunk_id: -fused[chunk_id])
    if lead is not None:
        order.sort(key=lambda chunk_id: not lead(best[chunk_id]))  # stable: fused order within each group
    out: list[RetrievedChunk] = []
    terms: dict[str, set[str]] = {}  # filled lazily: only chunks of similar length can be near-duplicates
    for chunk_id in order:
        chunk = best[chunk_id]
        if any(_near_duplicate(chunk, kept, terms) for kept in out):
            continue  # the same passage indexed twice (a re-upload, a copied section)
        out.append(chunk)
        if len(out) >= top_k:
            break
    return out


def _near_duplicate(a: RetrievedChunk, b: RetrievedChunk, terms: dict[str, set[str]]) -> bool:
    longer = max(len(a.text), len(b.text))
    if longer and abs(len(a.text) - len(b.text)) > (1 - _NEAR_DUPLICATE) * longer:
        return False
    for chunk in (a, b):
        if chunk.chunk_id not in terms:
            terms[chunk.chunk_id] = text_terms(chunk.text)
    return _jaccard(terms[a.chunk_id], terms[b.chunk_id]) >= _NEAR_DUPLICATE


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    return len(a & b) / len(a | b)


def _build(deps: PipelineDeps, params: dict[str, Any]) -> ToolExecutor:
    # 0 means "the deployment's setting" (PipelineConfig), so a workflow only overrides what it means to.
    return ToolExecutor(
        retriever=deps.retriever,
        top_k=params["top_k"] or deps.config.top_k,
        timeout=params["timeout"] or deps.config.retrieval_timeout,
    )


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Runs up to three searches in parallel, fuses them (RRF, k=60), removes duplicates, keeps the top k.",
        "zh-hant": "平行執行最多三組檢索，以 RRF（k=60）合併排名、去除重複，保留前 k 筆。",
    },
    inputs=INPUTS,
    optional_inputs=OPTIONAL_INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={
        "top_k": ParamSpec("int", 0, "Chunks to keep (0: the deployment's TOP_K)", minimum=0, maximum=50),
        "timeout": ParamSpec("float", 0.0, "Seconds per search (0: the deployment's timeout)", minimum=0),
    },
)
