"""The cache's vectors: one Qdrant collection beside the search index, reached through the store's own client.

Qdrant local mode lets one process open the folder, so the cache cannot open a client of its own: it uses the
`VectorStore`'s client and a collection named ``<alias>_semcache``. Not ``<alias>__semcache``: everything named
``<alias>__*`` is an index build (`VectorStore.builds()`), and a clean-up of old builds would delete the cache.

Each point is one entry (point id = `CacheEntry.id`) with the payload the hit path needs, so a lookup never
touches the database: language, index and prompt versions, the generation of the index build the answer came
from, expiry (epoch seconds), cited doc ids, and the question, answer and sources themselves.

Local mode filters payloads in Python, point by point: about 90 ms per filtered query over 1,000 points
(measured with qdrant-client 1.20), far above a cache lookup's budget. As `VectorStore` does for the live index,
local mode therefore answers from an in-process mirror (one numpy matrix per language/index/prompt scope), which
is exact because this process sees every write; Qdrant stays the storage the mirror is loaded from at start-up.
A Qdrant server answers its own (indexed) filtered queries, and is shared by every worker.

Everything here blocks: callers run it in a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qdrant_client import QdrantClient, models

from rag.semcache.guard import KeyTerms, QuestionFeatures, features

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
KEYWORD_FIELDS = ("language", "index_version", "prompt_version", "doc_ids")
_SCROLL_BATCH = 512


@dataclass(frozen=True, slots=True)
class CachePoint:
    entry_id: str
    vector: Sequence[float]
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Candidate:
    entry_id: str
    score: float
    payload: dict[str, Any]
    features: QuestionFeatures


Scope = tuple[str, str, str]  # (language, index_version, prompt_version)


def scope_of(payload: dict[str, Any]) -> Scope:
    return (
        str(payload.get("language", "")),
        str(payload.get("index_version", "")),
        str(payload.get("prompt_version", "")),
    )


@dataclass(slots=True)
class _Segment:
    """The entries of one scope; the matrix is rebuilt lazily after writes (rare next to lookups)."""

    dim: int
    ids: list[str] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    payloads: list[dict[str, Any]] = field(default_factory=list)
    features: list[QuestionFeatures] = field(default_factory=list)
    _matrix: np.ndarray | None = None
    _expires: np.ndarray | None = None

    def add(self, entry_id: str, vector: np.ndarray, payload: dict[str, Any], feats: QuestionFeatures) -> None:
        self.ids.append(entry_id)
        self.vectors.append(vector)
        self.payloads.append(payload)
        self.features.append(feats)
        self._matrix = None

    def remove(self, entry_id: str) -> None:
        row = self.ids.index(entry_id)
        for column in (self.ids, self.vectors, self.payloads, self.features):
            column.pop(row)
        self._matrix = None

    def search(self, query: np.ndarray, *, now: float, limit: int, threshold: float) -> list[tuple[int, float]]:
        if self._matrix is None or self._expires is None:
            self._matrix = np.vstack(self.vectors) if self.vectors else np.zeros((0, self.dim), dtype=np.float32)
            self._expires = np.array([float(p.get("expires_at", 0.0)) for p in self.payloads], dtype=np.float64)
        if not len(self.ids):
            return []
        scores = self._matrix @ query
        scores[self._expires <= now] = -np.inf
        order = np.argsort(-scores)[:limit]
        return [(int(row), float(scores[row])) for row in order if scores[row] >= threshold]


class CacheIndex:
    """The cache collection (`mirror=True`: answered from memory, for local mode)."""

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        *,
        dim: int,
        embedder_name: str,
        mirror: bool,
        local: bool,
        key_terms: KeyTerms,
    ) -> None:
        self.client = client
        self.collection = collection
        self.dim = dim
        self.embedder_name = embedder_name
        self.mirror = mirror
        self.local = local
        self.key_terms = key_terms
        # `_lock` guards the mirror and is held for microseconds, so lookups never wait on disk or network;
        # `_write_lock` serialises writes to this collection (the store's own lock guards its collections: in
        # local mode each collection is its own object and SQLite file, so the two never share state).
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._segments: dict[Scope, _Segment] = {}
        self._scope_of_id: dict[str, Scope] = {}
        self._known_size = 0  # a server's count, kept without asking it (stats must be quick)

    # --- opening -----------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Create the collection, or recreate it when it was built for another embedder; load the mirror."""
        metadata = {"schema": SCHEMA_VERSION, "embedder": self.embedder_name, "dim": self.dim}
        with self._lock:
            if self.client.collection_exists(self.collection):
                found = dict(self.client.get_collection(self.collection).config.metadata or {})
                if {key: found.get(key) for key in metadata} == metadata:
                    if self.mirror:
                        self._load()
                    else:
                        self._known_size = self.client.count(self.collection, exact=False).count
                    return
                # Vectors of another embedder cannot be compared with ours; the cache is only a cache.
                logger.info("semantic cache collection %s was built for %s; recreating it", self.collection, found)
                self.client.delete_collection(self.collection)
            self.client.create_collection(
                self.collection,
                vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.COSINE),
                metadata=metadata,
            )
            if not self.local:
                for name in KEYWORD_FIELDS:
                    self.client.create_payload_index(self.collection, name, models.PayloadSchemaType.KEYWORD)
                self.client.create_payload_index(self.collection, "expires_at", models.PayloadSchemaType.FLOAT)

    def _load(self) -> None:
        self._segments.clear()
        self._scope_of_id.clear()
        for record in self._scroll(with_vectors=True):
            vector = record.vector if isinstance(record.vector, list) else None
            if vector is None or len(vector) != self.dim:
                continue
            self._mirror_add(str(record.id), vector, dict(record.payload or {}))
        logger.info("semantic cache: %d entries loaded from %s", len(self._scope_of_id), self.collection)

    def _scroll(self, *, with_vectors: bool, payload: bool | list[str] = True) -> Iterable[models.Record]:
        offset: Any = None
        while True:
            batch, offset = self.client.scroll(
                self.collection, limit=_SCROLL_BATCH, offset=offset, with_payload=payload, with_vectors=with_vectors
            )
            yield from batch
            if offset is None:
                return

    def _mirror_add(self, entry_id: str, vector: Sequence[float], payload: dict[str, Any]) -> None:
        array = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(array))
        if norm > 0:
            array = array / norm  # cosine, as Qdrant scores it
        if entry_id in self._scope_of_id:
            self._mirror_remove(entry_id)
        scope = scope_of(payload)
        segment = self._segments.setdefault(scope, _Segment(self.dim))
        segment.add(entry_id, array, payload, self._features(payload))
        self._scope_of_id[entry_id] = scope

    def _mirror_remove(self, entry_id: str) -> bool:
        scope = self._scope_of_id.pop(entry_id, None)
        if scope is None:
            return False
        segment = self._segments[scope]
        segment.remove(entry_id)
        if not segment.ids:
            del self._segments[scope]
        return True

    def _features(self, payload: dict[str, Any]) -> QuestionFeatures:
        return features(str(payload.get("normalized_question", "")), self.key_terms)

    # --- reading -----------------------------------------------------------------------------------------------

    def known_size(self) -> int:
        """Entries held: exact with the mirror, approximate for a server (other workers write too). Quick."""
        return len(self._scope_of_id) if self.mirror else self._known_size

    def search(
        self,
        vector: Sequence[float],
        *,
        language: str,
        index_version: str,
        prompt_version: str,
        now: float,
        limit: int,
        threshold: float,
    ) -> list[Candidate]:
        """Live entries of the scope at or above `threshold`, best first."""
        if self.mirror:
            query = np.asarray(vector, dtype=np.float32)
            norm = float(np.linalg.norm(query))
            if norm == 0:
                return []
            query /= norm
            with self._lock:
                segment = self._segments.get((language, index_version, prompt_version))
                if segment is None:
                    return []
                return [
                    Candidate(segment.ids[row], score, segment.payloads[row], segment.features[row])
                    for row, score in segment.search(query, now=now, limit=limit, threshold=threshold)
                ]
        scope = models.Filter(
            must=[
                models.FieldCondition(key="language", match=models.MatchValue(value=language)),
                models.FieldCondition(key="index_version", match=models.MatchValue(value=index_version)),
                models.FieldCondition(key="prompt_version", match=models.MatchValue(value=prompt_version)),
                models.FieldCondition(key="expires_at", range=models.Range(gt=now)),
            ]
        )
        points = self.client.query_points(
            self.collection,
            query=list(vector),
            query_filter=scope,
            limit=limit,
            score_threshold=threshold,
            with_payload=True,
        ).points
        return [
            Candidate(str(p.id), float(p.score), dict(p.payload or {}), self._features(dict(p.payload or {})))
            for p in points
        ]

    def ids(self) -> dict[str, float]:
        """Every entry id with its creation time (epoch seconds), for reconciliation with the database."""
        if self.mirror:
            with self._lock:
                return {
                    entry_id: float(segment.payloads[row].get("created_at", 0.0))
                    for segment in self._segments.values()
                    for row, entry_id in enumerate(segment.ids)
                }
        return {
            str(record.id): float((record.payload or {}).get("created_at", 0.0))
            for record in self._scroll(with_vectors=False, payload=["created_at"])
        }

    def ids_matching(
        self,
        *,
        doc_ids: Iterable[str] = (),
        expired_at: float | None = None,
        not_index_version: str = "",
        outdated: Callable[[dict[str, Any]], bool] | None = None,
    ) -> set[str]:
        """Entries citing one of `doc_ids`, expired at `expired_at`, built on an index other than
        `not_index_version`, or whose payload `outdated` accepts (it sees doc_ids, expires_at, index_version and
        index_generation)."""
        wanted = set(doc_ids)
        if self.mirror:
            with self._lock:
                return {
                    entry_id
                    for segment in self._segments.values()
                    for entry_id, payload in zip(segment.ids, segment.payloads, strict=True)
                    if _matches(payload, wanted, expired_at, not_index_version, outdated)
                }
        found: set[str] = set()
        fields = ["doc_ids", "expires_at", "index_version", "index_generation"]
        for record in self._scroll(with_vectors=False, payload=fields):
            if _matches(dict(record.payload or {}), wanted, expired_at, not_index_version, outdated):
                found.add(str(record.id))
        return found

    # --- writing -----------------------------------------------------------------------------------------------

    def upsert(self, points: Sequence[CachePoint]) -> None:
        if not points:
            return
        structs = [models.PointStruct(id=p.entry_id, vector=list(p.vector), payload=p.payload) for p in points]
        with self._write_lock:
            self.client.upsert(self.collection, points=structs, wait=True)
            # searchable only once stored: a failed write leaves nothing behind to serve
            with self._lock:
                self._known_size += len(points)
                if self.mirror:
                    for point in points:
                        self._mirror_add(point.entry_id, point.vector, point.payload)

    def delete(self, entry_ids: Iterable[str]) -> int:
        """Remove entries (unknown ids are ignored); returns how many the mirror held (or were asked, for a server)."""
        ids = sorted(set(entry_ids))
        if not ids:
            return 0
        with self._write_lock:
            # Out of the mirror first: from here on no lookup can return them, even if the write below fails.
            with self._lock:
                removed = sum(self._mirror_remove(entry_id) for entry_id in ids) if self.mirror else len(ids)
                self._known_size = max(0, self._known_size - removed)
            self.client.delete(self.collection, points_selector=models.PointIdsList(points=list(ids)), wait=True)
        return removed

    def clear(self) -> None:
        with self._write_lock:
            with self._lock:
                self._segments.clear()
                self._scope_of_id.clear()
                self._known_size = 0
            self.client.delete(
                self.collection, points_selector=models.FilterSelector(filter=models.Filter()), wait=True
            )


def _matches(
    payload: dict[str, Any],
    doc_ids: set[str],
    expired_at: float | None,
    not_index_version: str,
    outdated: Callable[[dict[str, Any]], bool] | None,
) -> bool:
    if doc_ids and doc_ids.intersection(payload.get("doc_ids") or ()):
        return True
    if outdated is not None and outdated(payload):
        return True
    if expired_at is not None and float(payload.get("expires_at", 0.0)) <= expired_at:
        return True
    return bool(not_index_version) and payload.get("index_version") != not_index_version
