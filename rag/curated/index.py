"""This worker's copy of the curated answers, and the lookup the pipeline's `curated_lookup` node asks.

Curated answers are few (hundreds, not the cache's tens of thousands), so each worker holds all active ones in
memory with the vectors of their questions, embedded here, and reloads them whole when the curated revision moves
(rag.curated.services bumps it on every write and publishes the change). `sync()` is called by the worker's
replica handler (rag.replica) when the change feed says the curated answers changed; it also writes the hits
counted since the last call, and retires the semantic cache's answers to questions a new or edited curated answer
now covers (they would never be served again: the curated lookup comes first). Hits are also written
`hits_flush_delay` seconds after the first one counted since the last write, on the copy's own thread.

A lookup is the semantic cache's: the embedding of the normalised question without its question scaffolding,
cosine above `threshold`, and then the cache's false-hit guard (numbers, negation, key terms, content words must
agree). The matched answer is given in the asker's language when its topic has that variant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.utils import timezone

from rag.curated.models import CuratedAnswer
from rag.curated.services import REVISION_NAME, curated_activate, curated_hits_record
from rag.models import StoreRevision
from rag.retrieval.embedding import AsyncEmbedder, Embedder
from rag.semcache.cache import embed_key
from rag.semcache.guard import DEFAULT_KEY_TERMS, KeyTerms, QuestionFeatures, disagreement, features, question_normalize

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.65
# (vector, normalised question, language) of a curated question: retire cached answers it supersedes
Supersede = Callable[[list[float], str, str], int]


@dataclass(frozen=True, slots=True)
class CuratedMatch:
    curated_id: str
    score: float
    language: str
    question: str
    answer: str
    sources: list[dict[str, Any]]


@dataclass(slots=True)
class _Entry:
    curated_id: str
    topic: str
    language: str
    question: str
    answer: str
    url: str
    title: str
    vector: np.ndarray
    features: QuestionFeatures


@dataclass(slots=True)
class _Snapshot:
    entries: list[_Entry] = field(default_factory=list)
    matrix: np.ndarray | None = None


class CuratedAnswers:
    def __init__(
        self,
        *,
        embedder: Embedder,
        threshold: float = DEFAULT_THRESHOLD,
        key_terms: KeyTerms = DEFAULT_KEY_TERMS,
        supersede: Supersede | None = None,
        hits_flush_delay: float = 2.0,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.embedder = embedder
        self.threshold = threshold
        self._key_terms = key_terms
        self._supersede = supersede
        self._snapshot = _Snapshot()  # replaced whole: a lookup reads one consistent copy without a lock
        self._revision: str | None = None  # the tag of the revision loaded (None: nothing loaded yet)
        self._vectors: dict[str, np.ndarray] = {}  # embed_key text -> unit vector (reused across reloads)
        self._sync_lock = threading.Lock()
        self._hits_lock = threading.Lock()
        self._pending_hits: dict[str, tuple[int, datetime]] = {}
        self._hits_flush_delay = hits_flush_delay
        self._hits_flush: asyncio.TimerHandle | None = None
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="curated")
        self.lookups = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._snapshot.entries)

    # --- the pipeline's protocol (rag.nodes.curated_lookup) ------------------------------------------------------

    async def lookup(self, question: str, *, language: str) -> CuratedMatch | None:
        """The curated answer for a question close enough to one staff approved, or None (at once when none)."""
        if not self._snapshot.entries or not question.strip():
            return None
        normalized = question_normalize(question)
        vector = None
        if isinstance(self.embedder, AsyncEmbedder):
            vector = await self.embedder.aembed_query(embed_key(normalized))
        loop = asyncio.get_running_loop()
        match = await loop.run_in_executor(self._executor, self._lookup_sync, normalized, language, vector)
        if match is not None and self._hits_flush is None:
            self._hits_flush = loop.call_later(self._hits_flush_delay, self._hits_flush_start)
        return match

    def _hits_flush_start(self) -> None:
        self._hits_flush = None
        with contextlib.suppress(RuntimeError):  # closed meanwhile: close() wrote them
            self._executor.submit(self._hits_flush_logged)

    def _hits_flush_logged(self) -> None:
        try:
            self._flush_hits()
        except Exception:
            logger.exception("curated answers: hits not written; kept for the next try")

    def _lookup_sync(self, normalized: str, language: str, vector: list[float] | None) -> CuratedMatch | None:
        snapshot = self._snapshot
        self.lookups += 1
        if snapshot.matrix is None or not snapshot.entries:
            return None
        query = self._unit(vector if vector is not None else self.embedder.embed_query(embed_key(normalized)))
        if query is None:
            return None
        scores = snapshot.matrix @ query
        asked = features(normalized, self._key_terms)
        for row in np.argsort(-scores)[:5]:
            score = float(scores[row])
            if score < self.threshold:
                break
            entry = snapshot.entries[int(row)]
            if disagreement(asked, entry.features) is not None:
                continue
            served = self._variant(snapshot, entry, language)
            self._count_hit(served.curated_id)
            return CuratedMatch(
                curated_id=served.curated_id,
                score=score,
                language=served.language,
                question=served.question,
                answer=served.answer,
                sources=[{"ref": 1, "doc_id": "", "title": served.title or served.url, "url": served.url}]
                if served.url
                else [],
            )
        return None

    @staticmethod
    def _variant(snapshot: _Snapshot, matched: _Entry, language: str) -> _Entry:
        if matched.language == language:
            return matched
        same_topic = (e for e in snapshot.entries if e.topic == matched.topic and e.language == language)
        return next(same_topic, matched)

    def _count_hit(self, curated_id: str) -> None:
        with self._hits_lock:
            self.hits += 1
            count, _last = self._pending_hits.get(curated_id, (0, timezone.now()))
            self._pending_hits[curated_id] = (count + 1, timezone.now())

    # --- keeping in step (rag.replica calls sync on a thread when the change feed says they changed) ------------

    def sync(self) -> bool:
        """Reload when the curated revision moved (True then); write the hits counted since the last call."""
        with self._sync_lock:
            self._flush_hits()
            row = StoreRevision.objects.filter(name=REVISION_NAME).values_list("tag", flat=True).first()
            revision = row or ""
            if revision == self._revision:
                return False
            self._reload()
            self._revision = revision
            return True

    def _reload(self) -> None:
        previous = {entry.curated_id: entry.question for entry in self._snapshot.entries}
        rows = CuratedAnswer.objects.filter(active=True).values_list(
            "id", "topic", "language", "question", "answer", "source_url", "source_title"
        )
        entries: list[_Entry] = []
        vectors: dict[str, np.ndarray] = {}
        for curated_id, topic, language, question, answer, url, title in rows:
            normalized = question_normalize(question)
            key = embed_key(normalized)
            vector = self._vectors.get(key)
            if vector is None:
                vector = self._unit(self.embedder.embed_query(key))
                if vector is None:
                    continue
            vectors[key] = vector
            entries.append(
                _Entry(
                    str(curated_id),
                    str(topic),
                    language,
                    question,
                    answer,
                    url,
                    title,
                    vector,
                    features(normalized, self._key_terms),
                )
            )
        self._vectors = vectors
        matrix = np.vstack([e.vector for e in entries]) if entries else None
        self._snapshot = _Snapshot(entries, matrix)
        logger.info("curated answers: %d active loaded", len(entries))
        # the first load retires nothing: what is cached was cached while those answers existed
        if self._supersede is not None and self._revision is not None:
            for entry in entries:
                if previous.get(entry.curated_id) != entry.question:  # new, or its question changed
                    self._retire(entry)

    def _retire(self, entry: _Entry) -> None:
        assert self._supersede is not None
        try:
            retired = self._supersede(entry.vector.tolist(), question_normalize(entry.question), entry.language)
        except Exception:
            logger.exception("curated answers: retiring the cached answers a curated one supersedes failed")
            return
        if retired:
            logger.info("curated answers: %d cached answers retired by a curated one", retired)

    def _flush_hits(self) -> None:
        with self._hits_lock:
            pending, self._pending_hits = self._pending_hits, {}
        if not pending:
            return
        try:
            curated_hits_record(hits=pending)
        except Exception:
            with self._hits_lock:  # counted at the next call
                for curated_id, (count, last) in pending.items():
                    more, newest = self._pending_hits.get(curated_id, (0, last))
                    self._pending_hits[curated_id] = (count + more, max(last, newest))
            raise

    def _unit(self, vector: Any) -> np.ndarray | None:
        array = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(array))
        return array / norm if norm > 0 else None

    def close(self) -> None:
        if self._hits_flush is not None:
            self._hits_flush.cancel()
        try:
            self._flush_hits()
        except Exception:
            logger.exception("curated answers: hits not written at close")
        self._executor.shutdown(wait=False)
        curated_activate(None)

    def stats(self) -> dict[str, Any]:
        return {"active": len(self), "lookups": self.lookups, "hits": self.hits, "threshold": self.threshold}


def build_curated_answers(
    embedder: Embedder, *, threshold: float = DEFAULT_THRESHOLD, supersede: Supersede | None = None
) -> CuratedAnswers:
    """The process's copy, loaded now (blocking: call it where the dependencies are built)."""
    curated = CuratedAnswers(embedder=embedder, threshold=threshold, supersede=supersede)
    curated.sync()
    curated_activate(curated)
    return curated
