"""The vector store: index builds made aside and published through an alias, searched from memory or by Qdrant.

Each index build is its own collection ``<alias>__<version>`` with a named dense vector ("dense", cosine) and a
named sparse vector ("bm25", BM25 IDF). The live name is an alias: a reindex fills a new collection while
searches keep hitting the old one, then one alias operation switches them, so a search sees either the old or the
new index, never a half-built one. Where other processes read the store (the database, a Qdrant server), the
build a switch replaces is kept (behind a second alias, ``<alias>_previous``) until the next switch: a query, or
another worker loading its replica, that resolved the alias just before the switch still finds it. Qdrant's local
mode (one process) deletes the replaced build at once.

Storage is a backend (`rag.retrieval.backends`): the Django database (the default without `QDRANT_URL`, see
`rag.retrieval.db_backend`), a Qdrant server, or qdrant-client's local mode (tests, benchmarks). With the database
or local mode, queries are answered by a `MemoryIndex`, an exact in-memory replica of the live build; `sync()`
reloads it when another process switched the live build or wrote into it (a server calls it every half second:
`rag.replica`). A Qdrant server answers its own queries (`engine="qdrant"`, its Query API).
Each build also carries an `IndexVersion` in its metadata: what answers drawn from the index (the semantic
cache's) depend on. It survives incremental builds and changes only when every answer may be wrong.

Everything here blocks: async callers use `asyncio.to_thread`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from rag.retrieval.backends import (
    DENSE,
    KEYWORD_FIELDS,
    SPARSE,
    AliasOperation,
    CollectionNotFound,
    QdrantBackend,
    StoreBackend,
    StoreError,
    StoreLockedError,
    StorePoint,
    is_not_found,
)
from rag.retrieval.memory_index import MemoryIndex
from rag.retrieval.sparse import SparseVector

__all__ = [
    "DENSE",
    "KEYWORD_FIELDS",
    "SEARCH_MODES",
    "SPARSE",
    "CollectionNotFound",
    "Engine",
    "IndexVersion",
    "SearchMode",
    "SearchSettings",
    "StoreError",
    "StoreHit",
    "StoreLockedError",
    "StorePoint",
    "VectorStore",
    "open_store_from_settings",
    "rescore",
    "rrf",
    "weighted",
]

logger = logging.getLogger(__name__)

SearchMode = Literal["sparse", "dense", "hybrid_rrf", "hybrid_weighted", "hybrid_rescore"]
HYBRID_MODES: tuple[str, ...] = ("hybrid_rrf", "hybrid_weighted", "hybrid_rescore")
SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
Engine = Literal["auto", "memory", "qdrant"]
VERSION_KEY = "index_version"  # the build metadata's key for its IndexVersion
# documents an IndexVersion remembers as changed; past this a build starts a new lineage (the metadata stays small)
MAX_CHANGED_DOCUMENTS = 10_000


@dataclass(frozen=True, slots=True)
class StoreHit:
    point_id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """Knobs of the search modes (defaults chosen on DRCD, see scripts/eval_drcd_quick.py)."""

    candidates: int = 50  # per-source depth before fusion / re-scoring
    rrf_k: int = 60
    rescore_weight: float = 0.1  # hybrid_rescore: bm25/max(bm25) + weight * cosine
    dense_weight: float = 0.3  # hybrid_weighted: (1 - w) * bm25 + w * cosine, each min-max normalised
    # sparse: how many of BM25's first passages the retriever re-ranks by their best two sentences (0: none;
    # rag.retrieval.rerank)
    rerank_depth: int = 10


def new_version() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ").lower()


@dataclass(frozen=True, slots=True)
class IndexVersion:
    """Which answers drawn from earlier builds still hold in a build.

    `version` (the lineage) changes only when answers from the old index could be wrong for everything: a build
    that reused nothing of the live one (a full rebuild, another embedder, BM25 parameters or chunking). A build
    that copies the live one's points keeps it, one `generation` further, and records in `changed` the
    documents it re-indexed or deleted (doc_id -> the generation that last did). An answer retrieved at
    generation g is what the index still gives as long as none of the documents it cites changed after g.
    """

    version: str
    generation: int = 1
    changed: Mapping[str, int] = field(default_factory=dict)

    def outdated(self, doc_ids: Iterable[str], since: int) -> bool:
        """Whether an answer citing `doc_ids`, retrieved at generation `since`, may be out of date."""
        if since > self.generation:
            return True  # from a build this one does not descend from
        return any(self.changed.get(doc_id, 0) > since for doc_id in doc_ids)

    def successor(self, changed: Iterable[str]) -> IndexVersion | None:
        """The version of a build made from this one that re-indexed or deleted `changed`; None when a new
        lineage should start instead (too many changed documents to remember)."""
        generation = self.generation + 1
        merged = {**self.changed, **dict.fromkeys(changed, generation)}
        if len(merged) > MAX_CHANGED_DOCUMENTS:
            return None
        return IndexVersion(self.version, generation, merged)

    def to_metadata(self) -> dict[str, Any]:
        return {"version": self.version, "generation": self.generation, "changed": dict(self.changed)}

    @classmethod
    def of_build(cls, metadata: Mapping[str, Any], collection: str) -> IndexVersion:
        """The version stored with a build; a build made before versions were stored is its own lineage, named
        after its collection (what cached answers were scoped by then)."""
        stored = metadata.get(VERSION_KEY)
        if not isinstance(stored, Mapping) or not stored.get("version"):
            return cls(collection)
        changed = stored.get("changed")
        return cls(
            str(stored["version"]),
            int(stored.get("generation") or 1),
            {str(k): int(v) for k, v in changed.items()} if isinstance(changed, Mapping) else {},
        )


class VectorStore:
    def __init__(self, backend: StoreBackend, alias: str, *, engine: Engine = "auto") -> None:
        if engine not in get_args(Engine):
            raise ValueError(f"engine must be one of {get_args(Engine)}")
        self.backend = backend
        self.alias = alias
        # one process only (Qdrant local mode): this process sees every write, and owns the folder
        self.local = backend.kind == "qdrant-local"
        self.location = backend.location
        replicable = backend.kind in ("qdrant-local", "database")
        self.use_memory = engine == "memory" or (engine == "auto" and replicable)
        if self.use_memory and not replicable:
            raise ValueError("the memory engine needs a store it can load from: the database or local mode")
        if engine == "qdrant" and backend.kind == "database":
            raise ValueError("the database store has no query engine of its own: use the memory engine")
        self._write_lock = threading.Lock()
        # (collection, revision, index), swapped whole; searches read it without a lock
        self._memory: tuple[str, int, MemoryIndex] | None = None
        self._memory_lock = threading.Lock()
        self._version: tuple[str, IndexVersion] | None = None  # (collection, its version): a build's never changes
        self._closed = False

    # --- opening -------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        alias: str,
        *,
        path: Path | str | None = None,
        url: str = "",
        api_key: str = "",
        timeout: float = 10.0,
        engine: Engine = "auto",
    ) -> VectorStore:
        """A Qdrant server when `url` is set, else Qdrant's local mode in `path` (one process; raises
        `StoreLockedError` if `path` is taken). The database store is `open_database`."""
        return cls(QdrantBackend.open(path=path, url=url, api_key=api_key, timeout=timeout), alias, engine=engine)

    @classmethod
    def open_database(cls, alias: str, *, using: str = "default") -> VectorStore:
        """The store kept in the Django database (`rag.models`), answered from an in-memory replica."""
        # Imported here: it loads rag.models, which needs django.setup(); scripts/ use this module without it.
        from rag.retrieval.db_backend import DatabaseBackend

        return cls(DatabaseBackend(using=using), alias)

    @property
    def client(self) -> QdrantClient:
        """The Qdrant client of a Qdrant backend (its Query API; tests)."""
        if not isinstance(self.backend, QdrantBackend):
            raise StoreError(f"the {self.backend.kind} store has no Qdrant client")
        return self.backend.client

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._memory = None
            self.backend.close()

    def __enter__(self) -> VectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- state of the live index -----------------------------------------------------------------------------

    @property
    def previous_alias(self) -> str:
        """The alias of the build the last switch replaced (not ``<alias>__*``: that names builds)."""
        return f"{self.alias}_previous"

    @property
    def keeps_replaced(self) -> bool:
        """Whether a switch keeps the build it replaces (other processes may still read it)."""
        return self.backend.shared or not self.use_memory

    def live_collection(self) -> str | None:
        """The collection the alias points at (None before the first build)."""
        return self.backend.aliases().get(self.alias)

    def previous_collection(self) -> str | None:
        """The build the last switch replaced, kept until the next one (None if there is none)."""
        return self.backend.aliases().get(self.previous_alias)

    def builds(self) -> list[str]:
        """Every collection built for this alias, live or not, oldest first."""
        return self.backend.collections(f"{self.alias}__")

    def metadata(self) -> dict[str, Any]:
        """What the indexer stored with the live build (embedder, bm25 avgdl, counts); {} if none."""
        live = self.live_collection()
        if live is None:
            return {}
        return self.backend.collection_info(live)[1]

    def index_version(self) -> IndexVersion | None:
        """The live build's `IndexVersion` (None before the first build). As cheap as `live_collection()`: a
        build's metadata is read once, when the alias first points at it."""
        live = self.live_collection()
        if live is None:
            return None
        known = self._version
        if known is not None and known[0] == live:
            return known[1]
        try:
            metadata = self.backend.collection_info(live)[1]
        except CollectionNotFound:  # replaced between the two reads; the next call sees the new one
            return None
        version = IndexVersion.of_build(metadata, live)
        self._version = (live, version)
        return version

    def count(self) -> int:
        live = self.live_collection()
        return 0 if live is None else self.backend.count(live)

    def is_empty(self) -> bool:
        return self.count() == 0

    # --- building --------------------------------------------------------------------------------------------

    def create_build(
        self, *, dim: int, metadata: dict[str, Any] | None = None, version: IndexVersion | None = None
    ) -> str:
        """A new, empty collection for a build; nothing reads it until `activate`. `version` is stored in its
        metadata; None starts a new lineage named after the build."""
        name = f"{self.alias}__{new_version()}"
        metadata = {**(metadata or {}), VERSION_KEY: (version or IndexVersion(name)).to_metadata()}
        with self._write_lock:
            self.backend.create_collection(name, dim=dim, metadata=metadata)
        return name

    def upsert(self, collection: str, points: Sequence[StorePoint]) -> None:
        if not collection.startswith(f"{self.alias}__"):
            raise StoreError(f"{collection!r} is not a build of {self.alias!r}")
        if points:
            with self._write_lock:
                self.backend.upsert(collection, points)

    def scroll(self, collection: str, *, payload: bool | Sequence[str] = True, vectors: bool = False) -> Any:
        """Every point of a build (an iterator of `StorePoint`; without `vectors` their vectors are empty)."""
        return self.backend.scroll(collection, payload=payload, vectors=vectors)

    def retrieve(self, collection: str, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Payloads of points of a build by point id (missing ids are left out)."""
        return self.backend.retrieve(collection, point_ids) if point_ids else {}

    def activate(self, collection: str) -> str | None:
        """Point the alias at `collection` in one operation; returns the build it replaces.

        Where other processes read the store (`keeps_replaced`), the replaced build stays, as
        `previous_collection()`, for queries and replica loads already running on it, and the one it replaced
        in turn is deleted. Local mode deletes the replaced build at once: its queries run on the in-memory copy
        they took. Pointing the alias at the live build again (to reload the in-memory copy after writes into
        it) changes nothing else.
        """
        memory = self._load_memory(collection) if self.use_memory else None
        keep_replaced = self.keeps_replaced
        with self._write_lock:
            aliases = self.backend.aliases()
            previous = aliases.get(self.alias)
            retired = aliases.get(self.previous_alias)
            replaced = previous if previous != collection else None
            operations: list[AliasOperation] = []
            if previous is not None:
                operations.append(("delete", self.alias, ""))
            operations.append(("create", self.alias, collection))
            doomed: list[str] = []
            if replaced is not None:
                if retired is not None:
                    operations.append(("delete", self.previous_alias, ""))
                    doomed.append(retired)
                if keep_replaced:
                    operations.append(("create", self.previous_alias, replaced))
                else:
                    doomed.append(replaced)
            self.backend.update_aliases(operations)
            if memory is not None:
                # under the loader's lock: a search lazily loading the old build must not overwrite this one
                with self._memory_lock:
                    self._memory = (collection, memory[0], memory[1])
            kept = replaced if keep_replaced else None
            for name in dict.fromkeys(doomed):
                # the retired build is two switches old: a query that started on it had a whole build's time
                if name not in (collection, kept):
                    self.backend.delete_collection(name)
        return previous

    def drop(self, collection: str) -> None:
        """Delete a build that was never activated (a failed or cancelled reindex)."""
        aliases = self.backend.aliases()
        if collection == aliases.get(self.alias):
            raise StoreError(f"{collection!r} is live; activate another build first")
        if collection == aliases.get(self.previous_alias):
            raise StoreError(f"{collection!r} is the previous build, kept for queries in flight until the next switch")
        with self._write_lock:
            self.backend.delete_collection(collection)

    # --- the in-memory replica -------------------------------------------------------------------------------

    def sync(self) -> bool:
        """Reload the in-memory replica if the live build, or what was written into it, changed since it was
        loaded (another process switched or wrote); True when it did. One small query when nothing changed.
        Stores that answer their own queries have nothing to sync."""
        if not self.use_memory or self._closed:
            return False
        state = self.backend.live_state(self.alias)
        current = self._memory
        if state is None or (current is not None and (current[0], current[1]) == state):
            return False
        with self._memory_lock:
            current = self._memory
            if current is not None and (current[0], current[1]) == state:
                return False  # loaded meanwhile (an activate in this process)
            try:
                revision, index = self._load_memory(state[0])
            except CollectionNotFound:
                return False  # replaced again while loading: the next sync takes the newer one
            self._memory = (state[0], revision, index)
        logger.info("retrieval replica: loaded %s (%d points, revision %d)", state[0], len(index), revision)
        return True

    def replica(self) -> tuple[str, int] | None:
        """(collection, revision) of the in-memory replica, None when none is loaded."""
        current = self._memory
        return None if current is None else (current[0], current[1])

    def replica_points(self) -> int | None:
        """How many points the in-memory replica holds, None when none is loaded."""
        current = self._memory
        return None if current is None else len(current[2])

    def _load_memory(self, collection: str) -> tuple[int, MemoryIndex]:
        """(the build's revision when loading began, its points in a MemoryIndex). A write into the build while
        it loads moves the revision again, so the next `sync` reloads."""
        revision = self.backend.revision(collection)
        dim = self.backend.collection_info(collection)[0]
        records, dense, postings = self.backend.replica(collection, revision)
        if postings is not None:
            try:
                return revision, MemoryIndex(records, dim=dim, dense=dense, postings=postings)
            except ValueError:  # saved for another set of points: build them from the points after all
                records, dense, _ = self.backend.replica(collection, -1)
        index = MemoryIndex(records, dim=dim, dense=dense)
        if self.backend.save_postings(collection, revision, index.postings()):
            logger.info("retrieval replica: saved the postings of %s at revision %d", collection, revision)
        return revision, index

    def _current_memory(self) -> MemoryIndex | None:
        current = self._memory
        if current is not None:
            return current[2]
        with self._memory_lock:
            if self._memory is None:
                live = self.live_collection()
                if live is None:
                    return None
                try:
                    revision, index = self._load_memory(live)
                except CollectionNotFound:
                    return None
                self._memory = (live, revision, index)
            return self._memory[2]

    # --- searching -------------------------------------------------------------------------------------------

    def search(
        self,
        query_dense: Sequence[float] | None,
        query_sparse: SparseVector | None,
        *,
        limit: int,
        language: str | None = None,
        kind: str | None = None,
        mode: SearchMode = "sparse",
        settings: SearchSettings | None = None,
    ) -> list[StoreHit]:
        """Best `limit` points of the live index, best first; [] when there is no index yet."""
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}")
        if mode in ("sparse", *HYBRID_MODES) and query_sparse is None:
            raise ValueError(f"mode {mode!r} needs a sparse query")
        if mode in ("dense", *HYBRID_MODES) and query_dense is None:
            raise ValueError(f"mode {mode!r} needs a dense query")
        settings = settings or SearchSettings()
        if self.use_memory:
            return self._search_memory(query_dense, query_sparse, limit, language, kind, mode, settings)
        return self._search_qdrant(query_dense, query_sparse, limit, language, kind, mode, settings)

    def term_idf(self, tokens: Sequence[int]) -> list[float] | None:
        """BM25's IDF of each sparse token id in the live index (0 for one it does not hold), as the memory
        engine's search weighs them; None where the store cannot tell (a Qdrant server computes its IDF itself)
        or has no index yet."""
        if not self.use_memory:
            return None
        index = self._current_memory()
        if index is None or len(index) == 0:
            return None
        return index.idfs(tokens).tolist()

    def document_points(self, doc_id: str, *, limit: int) -> list[StoreHit]:
        """The live index's points of one document in the document's order (their `ordinal`), at most `limit`
        (score 0: nothing was searched); [] when there is no index or no such document."""
        if limit < 1 or not doc_id:
            return []
        if self.use_memory:
            index = self._current_memory()
            if index is None:
                return []
            hits = [StoreHit(index.ids[row], 0.0, index.payloads[row]) for row in index.document_rows(doc_id)]
        else:
            hits = self._document_points_qdrant(doc_id, limit)
        hits.sort(key=lambda hit: _ordinal(hit.payload))
        return hits[:limit]

    def _document_points_qdrant(self, doc_id: str, limit: int) -> list[StoreHit]:
        # A payload filter on doc_id (a keyword index on a server) and on the chunk's place in the document: a
        # document's ordinals run from 0, so its first `limit` chunks are those below `limit`. Scroll pages by
        # point id, so they are sorted afterwards.
        flt = models.Filter(
            must=[
                models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id)),
                models.FieldCondition(key="ordinal", range=models.Range(lt=limit)),
            ]
        )
        hits: list[StoreHit] = []
        offset: Any = None
        try:
            while len(hits) < limit:
                records, offset = self.client.scroll(
                    self.alias,
                    scroll_filter=flt,
                    limit=min(limit - len(hits), 256),
                    offset=offset,
                    with_payload=True,
                    with_vectors=False,
                )
                hits.extend(StoreHit(str(r.id), 0.0, dict(r.payload or {})) for r in records)
                if offset is None:
                    break
        except (ValueError, UnexpectedResponse) as exc:
            if is_not_found(exc):
                return []  # no alias yet
            raise
        return hits

    # memory engine

    def _search_memory(
        self,
        query_dense: Sequence[float] | None,
        query_sparse: SparseVector | None,
        limit: int,
        language: str | None,
        kind: str | None,
        mode: SearchMode,
        settings: SearchSettings,
    ) -> list[StoreHit]:
        index = self._current_memory()
        if index is None or len(index) == 0:
            return []
        keep = index.mask(language=language, kind=kind)
        ranked: list[tuple[int, float]]
        if mode == "dense":
            ranked = index.top(index.dense_scores(query_dense or ()), limit, keep)
        else:
            scores, matched = index.sparse_scores(query_sparse or SparseVector([], []))
            sparse_keep = matched if keep is None else matched & keep
            if mode == "sparse":
                ranked = index.top(scores, limit, sparse_keep)
            else:
                sparse_top = index.top(scores, settings.candidates, sparse_keep)
                dense_all = index.dense_scores(query_dense or ())
                if mode == "hybrid_rrf":
                    dense_top = index.top(dense_all, settings.candidates, keep)
                    ranked = rrf([sparse_top, dense_top], k=settings.rrf_k)[:limit]
                elif mode == "hybrid_weighted":
                    dense_top = index.top(dense_all, settings.candidates, keep)
                    ranked = weighted(sparse_top, dense_top, weight=settings.dense_weight)[:limit]
                else:
                    ranked = rescore(sparse_top, dense_all, weight=settings.rescore_weight)[:limit]
                    if not ranked:  # nothing shares a word with the query: the dense side is all we have
                        ranked = index.top(dense_all, limit, keep)
        return [StoreHit(index.ids[row], score, index.payloads[row]) for row, score in ranked]

    # qdrant engine (a server, or local mode when forced)

    def _search_qdrant(
        self,
        query_dense: Sequence[float] | None,
        query_sparse: SparseVector | None,
        limit: int,
        language: str | None,
        kind: str | None,
        mode: SearchMode,
        settings: SearchSettings,
    ) -> list[StoreHit]:
        conditions: list[models.Condition] = [
            models.FieldCondition(key=key, match=models.MatchValue(value=value))
            for key, value in (("language", language), ("kind", kind))
            if value is not None
        ]
        flt = models.Filter(must=conditions) if conditions else None
        sparse = models.SparseVector(
            indices=list(query_sparse.indices if query_sparse else []),
            values=list(query_sparse.values if query_sparse else []),
        )
        dense = list(query_dense or [])
        try:
            if mode == "hybrid_rescore":
                return self._rescore_qdrant(sparse, dense, flt, limit, settings)
            if mode == "hybrid_weighted":
                return self._weighted_qdrant(sparse, dense, flt, limit, settings)
            if mode == "sparse" and not sparse.indices:
                return []  # an empty sparse query matches nothing
            if mode in ("sparse", "dense"):
                points = self.client.query_points(
                    self.alias,
                    query=sparse if mode == "sparse" else dense,
                    using=SPARSE if mode == "sparse" else DENSE,
                    query_filter=flt,
                    limit=limit,
                    with_payload=True,
                ).points
            else:
                prefetch = [models.Prefetch(query=dense, using=DENSE, limit=settings.candidates)]
                if sparse.indices:
                    prefetch.insert(0, models.Prefetch(query=sparse, using=SPARSE, limit=settings.candidates))
                points = self.client.query_points(
                    self.alias,
                    prefetch=prefetch,
                    query=models.RrfQuery(rrf=models.Rrf(k=settings.rrf_k)),
                    query_filter=flt,
                    limit=limit,
                    with_payload=True,
                ).points
        except (ValueError, UnexpectedResponse) as exc:
            # no alias yet (before the first build): local mode says ValueError "not found", a server 404
            if is_not_found(exc):
                return []
            raise
        return [_hit(p) for p in points]

    def _weighted_qdrant(
        self,
        sparse: models.SparseVector,
        dense: list[float],
        flt: models.Filter | None,
        limit: int,
        settings: SearchSettings,
    ) -> list[StoreHit]:
        # both sides' candidates, fused here as the memory engine fuses them
        sides: list[list[models.ScoredPoint]] = []
        for query, using in ((sparse, SPARSE), (dense, DENSE)):
            if using == SPARSE and not sparse.indices:
                sides.append([])
                continue
            sides.append(
                self.client.query_points(
                    self.alias, query=query, using=using, query_filter=flt, limit=settings.candidates, with_payload=True
                ).points
            )
        points = {str(p.id): p for side in sides for p in side}
        ranked = weighted(
            [(str(p.id), float(p.score)) for p in sides[0]],
            [(str(p.id), float(p.score)) for p in sides[1]],
            weight=settings.dense_weight,
        )
        return [StoreHit(key, score, dict(points[key].payload or {})) for key, score in ranked[:limit]]

    def _rescore_qdrant(
        self,
        sparse: models.SparseVector,
        dense: list[float],
        flt: models.Filter | None,
        limit: int,
        settings: SearchSettings,
    ) -> list[StoreHit]:
        # one request: the sparse candidates with their dense vectors, re-scored here
        candidates = []
        if sparse.indices:
            candidates = self.client.query_points(
                self.alias,
                query=sparse,
                using=SPARSE,
                query_filter=flt,
                limit=settings.candidates,
                with_payload=True,
                with_vectors=[DENSE],
            ).points
        if not candidates:  # nothing shares a word with the query: the dense side is all we have
            points = self.client.query_points(
                self.alias, query=dense, using=DENSE, query_filter=flt, limit=limit, with_payload=True
            ).points
            return [_hit(p) for p in points]
        rows = []
        for point in candidates:
            vector = point.vector.get(DENSE) if isinstance(point.vector, dict) else None
            rows.append(vector if isinstance(vector, list) and vector else [0.0] * len(dense))
        matrix = np.asarray(rows, dtype=np.float32)
        query = np.asarray(dense, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * (float(np.linalg.norm(query)) or 1.0)
        cosines = np.divide(matrix @ query, norms, out=np.zeros(len(rows), dtype=np.float32), where=norms > 0)
        ranked = rescore([(i, float(p.score)) for i, p in enumerate(candidates)], cosines, settings.rescore_weight)
        return [
            StoreHit(str(candidates[i].id), score, dict(candidates[i].payload or {})) for i, score in ranked[:limit]
        ]


def open_store_from_settings(*, engine: Engine = "auto") -> VectorStore:
    """The store Django settings configure: a Qdrant server with QDRANT_URL (+ QDRANT_API_KEY), else the
    database; alias QDRANT_COLLECTION. The one function here that reads settings, for wiring and commands;
    everything else in rag.retrieval takes its configuration as arguments.
    """
    from django.conf import settings  # here, like DatabaseBackend: scripts/ use this module without Django

    if settings.QDRANT_URL:
        return VectorStore.open(
            settings.QDRANT_COLLECTION, url=settings.QDRANT_URL, api_key=settings.QDRANT_API_KEY or "", engine=engine
        )
    return VectorStore.open_database(settings.QDRANT_COLLECTION)


def _ordinal(payload: Mapping[str, Any]) -> tuple[int, str]:
    """A chunk's place in its document: the indexer's ordinal, else the number its chunk id ends with."""
    ordinal = payload.get("ordinal")
    chunk_id = str(payload.get("chunk_id", ""))
    if not isinstance(ordinal, int):
        tail = chunk_id.rsplit("#", 1)[-1]
        ordinal = int(tail) if tail.isdigit() else 0
    return ordinal, chunk_id


def _hit(point: models.ScoredPoint) -> StoreHit:
    return StoreHit(str(point.id), float(point.score), dict(point.payload or {}))


def rrf(rankings: Sequence[Sequence[tuple[int, float]]], *, k: int) -> list[tuple[int, float]]:
    """Reciprocal rank fusion with Qdrant's formula, 1/(k + position) with positions from 0."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for position, (row, _) in enumerate(ranking):
            fused[row] = fused.get(row, 0.0) + 1.0 / (k + position)
    return sorted(fused.items(), key=lambda item: item[1], reverse=True)


K = TypeVar("K", bound=Hashable)


def _normaliser(top: Sequence[tuple[Any, float]]) -> Callable[[float], float]:
    """Min-max over one side's candidates, clipped to [0, 1] (a score below the last candidate counts 0)."""
    if not top:
        return lambda score: 0.0
    high = max(score for _, score in top)
    low = min(score for _, score in top)
    span = high - low
    if span <= 0:
        return lambda score: 1.0 if score >= high else 0.0
    return lambda score: min(1.0, max(0.0, (score - low) / span))


def weighted(
    sparse_top: Sequence[tuple[K, float]], dense_top: Sequence[tuple[K, float]], *, weight: float
) -> list[tuple[K, float]]:
    """Weighted score fusion: (1 - weight) * bm25 + weight * cosine, each side min-max normalised over its own
    candidates, best first. A key missing from one side's list scores at most that list's last score, which
    normalises to 0: it counts 0 there (so the in-memory index and a Qdrant server, which only returns its top
    list, fuse alike). Unlike RRF it keeps how far apart the scores are: a passage far ahead on one side stays
    ahead unless the other side disagrees strongly."""
    norm_sparse, norm_dense = _normaliser(sparse_top), _normaliser(dense_top)
    sparse, dense = dict(sparse_top), dict(dense_top)
    fused: dict[K, float] = {}
    for key in [*sparse, *(key for key in dense if key not in sparse)]:
        lexical = norm_sparse(sparse[key]) if key in sparse and sparse[key] > 0 else 0.0
        semantic = norm_dense(dense[key]) if key in dense else 0.0
        fused[key] = (1.0 - weight) * lexical + weight * semantic
    return sorted(fused.items(), key=lambda item: item[1], reverse=True)


def rescore(sparse_top: Sequence[tuple[int, float]], dense: np.ndarray, weight: float) -> list[tuple[int, float]]:
    """Sparse candidates re-ranked by bm25/max(bm25) + weight * cosine (`dense` indexed by the same keys)."""
    if not sparse_top:
        return []
    best = sparse_top[0][1] or 1.0
    scored = [(row, score / best + weight * float(dense[row])) for row, score in sparse_top]
    return sorted(scored, key=lambda item: item[1], reverse=True)
