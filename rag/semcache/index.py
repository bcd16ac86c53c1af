"""Where the cache's entries are searched: the `CacheIndex` protocol, the in-process `Mirror`, and the Qdrant one.

An entry is a vector with the payload the hit path needs, so a lookup never touches the database: language,
index and prompt versions, producer, the generation of the index build the answer came from, expiry (epoch
seconds), cited doc ids, and the question, answer and sources themselves.

Two homes: the database (rag.semcache.db_index, the default: each row holds its vector, every worker answers from
a `Mirror` kept in step), or a Qdrant collection beside the search index (`QdrantCacheIndex`), reached through the
`VectorStore`'s own client and named ``<alias>_semcache`` (not ``<alias>__semcache``: everything named
``<alias>__*`` is an index build, and a clean-up of old builds would delete the cache). A Qdrant server answers
its own (indexed) filtered queries; Qdrant's local mode (one process, tests) filters payloads in Python at about
90 ms a query over 1,000 points, so it is answered from a `Mirror` too (one numpy matrix per scope), exact because
that process sees every write.

Everything here blocks: callers run it in a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np
from qdrant_client import QdrantClient, models

from rag.semcache.guard import KeyTerms, QuestionFeatures, features
from rag.semcache.selectors import cache_entry_ids_created_before
from rag.semcache.services import NewEntry, cache_entries_create

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2
_SCROLL_BATCH = 512


@dataclass(frozen=True, slots=True)
class Candidate:
    entry_id: str
    score: float
    payload: dict[str, Any]
    features: QuestionFeatures


Scope = tuple[str, str, str, str]  # (language, index_version, prompt_version, producer)
KEYWORD_FIELDS = ("language", "index_version", "prompt_version", "producer", "doc_ids")


def scope_of(payload: dict[str, Any]) -> Scope:
    return (
        str(payload.get("language", "")),
        str(payload.get("index_version", "")),
        str(payload.get("prompt_version", "")),
        str(payload.get("producer", "")),
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


class Mirror:
    """The entries held in this process, one `_Segment` per scope; guarded by its lock, held for microseconds."""

    def __init__(self, dim: int, key_terms: KeyTerms) -> None:
        self.dim = dim
        self.key_terms = key_terms
        self.lock = threading.Lock()
        self._segments: dict[Scope, _Segment] = {}
        self._scope_of_id: dict[str, Scope] = {}

    def __len__(self) -> int:
        return len(self._scope_of_id)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._scope_of_id

    def add(self, entry_id: str, vector: Sequence[float] | np.ndarray, payload: dict[str, Any]) -> None:
        """Hold the lock."""
        array = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(array))
        if norm > 0:
            array = array / norm  # cosine, as Qdrant scores it
        if entry_id in self._scope_of_id:
            self.remove(entry_id)
        scope = scope_of(payload)
        segment = self._segments.setdefault(scope, _Segment(self.dim))
        segment.add(entry_id, array, payload, features(str(payload.get("normalized_question", "")), self.key_terms))
        self._scope_of_id[entry_id] = scope

    def remove(self, entry_id: str) -> bool:
        """Hold the lock."""
        scope = self._scope_of_id.pop(entry_id, None)
        if scope is None:
            return False
        segment = self._segments[scope]
        segment.remove(entry_id)
        if not segment.ids:
            del self._segments[scope]
        return True

    def clear(self) -> None:
        """Hold the lock."""
        self._segments.clear()
        self._scope_of_id.clear()

    def search(
        self, vector: Sequence[float], scope: Scope, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if norm == 0:
            return []
        query = query / norm
        with self.lock:
            segment = self._segments.get(scope)
            if segment is None:
                return []
            return [
                Candidate(segment.ids[row], score, segment.payloads[row], segment.features[row])
                for row, score in segment.search(query, now=now, limit=limit, threshold=threshold)
            ]

    def search_language(
        self, vector: Sequence[float], language: str, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        """Like `search`, over every scope of `language` (any index, prompt and producer), best first."""
        found: list[Candidate] = []
        for scope in [scope for scope in list(self._segments) if scope[0] == language]:
            found.extend(self.search(vector, scope, now=now, limit=limit, threshold=threshold))
        return sorted(found, key=lambda candidate: -candidate.score)[:limit]

    def ids(self) -> dict[str, float]:
        with self.lock:
            return {
                entry_id: float(segment.payloads[row].get("created_at", 0.0))
                for segment in self._segments.values()
                for row, entry_id in enumerate(segment.ids)
            }

    def ids_matching(self, matches: Callable[[dict[str, Any]], bool]) -> set[str]:
        with self.lock:
            return {
                entry_id
                for segment in self._segments.values()
                for entry_id, payload in zip(segment.ids, segment.payloads, strict=True)
                if matches(payload)
            }


class CacheIndex(Protocol):
    """Where the cache's entries (vectors and the payload the hit path needs) are kept and searched."""

    dim: int

    def open(self) -> None: ...

    def sync(self) -> bool:
        """Take in what other processes wrote or deleted since the last call (True when something changed)."""
        ...

    def known_size(self) -> int: ...

    def search(
        self, vector: Sequence[float], scope: Scope, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]: ...

    def search_language(
        self, vector: Sequence[float], language: str, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        """Live entries of `language` in any scope at or above `threshold`, best first (a curated answer retires
        them whoever wrote them)."""
        ...

    def ids(self) -> dict[str, float]:
        """Every entry id with its creation time (epoch seconds), for reconciliation with the rows."""
        ...

    def rows_without_vectors(self, *, before: float, vectors: Collection[str]) -> set[str]:
        """Rows created before `before` (epoch seconds) whose entry has no vector (`vectors`: what `ids()` gave),
        so could never be served: a write that failed halfway."""
        ...

    def ids_matching(
        self,
        *,
        doc_ids: Iterable[str] = (),
        expired_at: float | None = None,
        not_index_version: str = "",
        outdated: Callable[[dict[str, Any]], bool] | None = None,
        producers: Collection[str] | None = None,
    ) -> set[str]: ...

    def add(
        self, entries: Sequence[NewEntry], vectors: Sequence[Sequence[float]], payloads: Sequence[dict[str, Any]]
    ) -> None:
        """Store new entries: their rows (staff list and delete them) and their vectors, both or neither."""
        ...

    def delete(self, entry_ids: Iterable[str]) -> int: ...

    def clear(self) -> None: ...


def matcher(
    *,
    doc_ids: Iterable[str] = (),
    expired_at: float | None = None,
    not_index_version: str = "",
    outdated: Callable[[dict[str, Any]], bool] | None = None,
    producers: Collection[str] | None = None,
) -> Callable[[dict[str, Any]], bool]:
    """Entries citing one of `doc_ids`, expired at `expired_at`, built on an index other than `not_index_version`,
    whose payload `outdated` accepts (it sees doc_ids, expires_at, index_version and index_generation), or
    written by a producer not among `producers` (None: any producer is fine)."""
    wanted = set(doc_ids)
    return lambda payload: _matches(payload, wanted, expired_at, not_index_version, outdated, producers)


class QdrantCacheIndex:
    """The cache's vectors in a Qdrant collection beside the search index (a server, or local mode with
    `mirror=True`: answered from memory); the rows are written to the database beside them."""

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
        self.mirror = Mirror(dim, key_terms) if mirror else None
        self.local = local
        self.key_terms = key_terms
        # `_write_lock` serialises writes to this collection (the store's own lock guards its collections: in
        # local mode each collection is its own object and SQLite file, so the two never share state).
        self._write_lock = threading.Lock()
        self._known_size = 0  # a server's count, kept without asking it (stats must be quick)

    # --- opening -----------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Create the collection, or recreate it when it was built for another embedder; load the mirror."""
        metadata = {"schema": SCHEMA_VERSION, "embedder": self.embedder_name, "dim": self.dim}
        if self.client.collection_exists(self.collection):
            found = dict(self.client.get_collection(self.collection).config.metadata or {})
            if {key: found.get(key) for key in metadata} == metadata:
                if self.mirror is not None:
                    self._load(self.mirror)
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

    def _load(self, mirror: Mirror) -> None:
        with mirror.lock:
            mirror.clear()
            for record in self._scroll(with_vectors=True):
                vector = record.vector if isinstance(record.vector, list) else None
                if vector is None or len(vector) != self.dim:
                    continue
                # the collection holds one unnamed dense vector per point: a list is that vector, not a multi-vector
                mirror.add(str(record.id), cast("list[float]", vector), dict(record.payload or {}))
        logger.info("semantic cache: %d entries loaded from %s", len(mirror), self.collection)

    def _scroll(self, *, with_vectors: bool, payload: bool | list[str] = True) -> Iterable[models.Record]:
        offset: Any = None
        while True:
            batch, offset = self.client.scroll(
                self.collection, limit=_SCROLL_BATCH, offset=offset, with_payload=payload, with_vectors=with_vectors
            )
            yield from batch
            if offset is None:
                return

    def sync(self) -> bool:
        # local mode is one process (it sees every write); a server answers every query itself
        return False

    # --- reading -----------------------------------------------------------------------------------------------

    def known_size(self) -> int:
        """Entries held: exact with the mirror, approximate for a server (other workers write too). Quick."""
        return len(self.mirror) if self.mirror is not None else self._known_size

    def search(
        self, vector: Sequence[float], scope: Scope, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        """Live entries of the scope at or above `threshold`, best first."""
        if self.mirror is not None:
            return self.mirror.search(vector, scope, now=now, limit=limit, threshold=threshold)
        language, index_version, prompt_version, producer = scope
        conditions: list[models.Condition] = [
            models.FieldCondition(key=key, match=models.MatchValue(value=value))
            for key, value in (
                ("language", language),
                ("index_version", index_version),
                ("prompt_version", prompt_version),
                ("producer", producer),
            )
        ]
        conditions.append(models.FieldCondition(key="expires_at", range=models.Range(gt=now)))
        return self._query(vector, conditions, limit=limit, threshold=threshold)

    def _query(
        self, vector: Sequence[float], conditions: list[models.Condition], *, limit: int, threshold: float
    ) -> list[Candidate]:
        """The server's nearest entries under `conditions`, as candidates with their question's features."""
        points = self.client.query_points(
            self.collection,
            query=list(vector),
            query_filter=models.Filter(must=conditions),
            limit=limit,
            score_threshold=threshold,
            with_payload=True,
        ).points
        return [
            Candidate(
                str(p.id),
                float(p.score),
                dict(p.payload or {}),
                features(str((p.payload or {}).get("normalized_question", "")), self.key_terms),
            )
            for p in points
        ]

    def search_language(
        self, vector: Sequence[float], language: str, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        if self.mirror is not None:
            return self.mirror.search_language(vector, language, now=now, limit=limit, threshold=threshold)
        conditions: list[models.Condition] = [
            models.FieldCondition(key="language", match=models.MatchValue(value=language)),
            models.FieldCondition(key="expires_at", range=models.Range(gt=now)),
        ]
        return self._query(vector, conditions, limit=limit, threshold=threshold)

    def ids(self) -> dict[str, float]:
        if self.mirror is not None:
            return self.mirror.ids()
        return {
            str(record.id): float((record.payload or {}).get("created_at", 0.0))
            for record in self._scroll(with_vectors=False, payload=["created_at"])
        }

    def ids_matching(self, **criteria: Any) -> set[str]:
        matches = matcher(**criteria)
        if self.mirror is not None:
            return self.mirror.ids_matching(matches)
        fields = ["doc_ids", "expires_at", "index_version", "index_generation", "producer"]
        return {
            str(record.id)
            for record in self._scroll(with_vectors=False, payload=fields)
            if matches(dict(record.payload or {}))
        }

    # --- writing -----------------------------------------------------------------------------------------------

    def rows_without_vectors(self, *, before: float, vectors: Collection[str]) -> set[str]:
        return cache_entry_ids_created_before(before=before) - set(vectors)

    def add(
        self, entries: Sequence[NewEntry], vectors: Sequence[Sequence[float]], payloads: Sequence[dict[str, Any]]
    ) -> None:
        """Vectors first, then rows; without its row an entry could not be listed or deleted by staff, so a
        failed row write takes the vectors back."""
        if not entries:
            return
        structs = [
            models.PointStruct(id=entry.entry_id, vector=[float(x) for x in vector], payload=payload)
            for entry, vector, payload in zip(entries, vectors, payloads, strict=True)
        ]
        with self._write_lock:
            self.client.upsert(self.collection, points=structs, wait=True)
        try:
            cache_entries_create(entries=entries)
        except Exception:
            self.delete(entry.entry_id for entry in entries)
            raise
        # searchable only once stored: a failed write leaves nothing behind to serve
        self._known_size += len(entries)
        if self.mirror is not None:
            with self.mirror.lock:
                for entry, vector, payload in zip(entries, vectors, payloads, strict=True):
                    self.mirror.add(entry.entry_id, vector, payload)

    def delete(self, entry_ids: Iterable[str]) -> int:
        """Remove entries' vectors (unknown ids are ignored); returns how many the mirror held (or were asked,
        for a server)."""
        ids = sorted(set(entry_ids))
        if not ids:
            return 0
        with self._write_lock:
            # Out of the mirror first: from here on no lookup can return them, even if the write below fails.
            if self.mirror is not None:
                with self.mirror.lock:
                    removed = sum(self.mirror.remove(entry_id) for entry_id in ids)
            else:
                removed = len(ids)
            self._known_size = max(0, self._known_size - removed)
            self.client.delete(self.collection, points_selector=models.PointIdsList(points=list(ids)), wait=True)
        return removed

    def clear(self) -> None:
        with self._write_lock:
            if self.mirror is not None:
                with self.mirror.lock:
                    self.mirror.clear()
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
    producers: Collection[str] | None,
) -> bool:
    if doc_ids and doc_ids.intersection(payload.get("doc_ids") or ()):
        return True
    if producers is not None and str(payload.get("producer", "")) not in producers:
        return True
    if outdated is not None and outdated(payload):
        return True
    if expired_at is not None and float(payload.get("expires_at", 0.0)) <= expired_at:
        return True
    return bool(not_index_version) and payload.get("index_version") != not_index_version
