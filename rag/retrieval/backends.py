"""Where the vector store keeps its builds: the storage half of `rag.retrieval.store.VectorStore`.

`VectorStore` speaks Qdrant's vocabulary (collections, aliases, points) and leaves storage to a backend:

- `QdrantBackend`: a Qdrant server (``url=``, shared by every worker, answering its own queries), or
  qdrant-client's local mode in a folder (``path=``, one process only; used by tests and benchmarks of the
  Qdrant code path).
- `rag.retrieval.db_backend.DatabaseBackend`: the Django database (the default without `QDRANT_URL`): every
  worker, command and machine that shares `DATABASE_URL` shares the index, and answers from a replica in memory.

Both are blocking; async callers use a thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from rag.retrieval.memory_index import DenseLoader, MemoryRecord, Postings
from rag.retrieval.sparse import SparseVector

DENSE = "dense"
SPARSE = "bm25"
# fields the retriever filters on; a server indexes them, local mode has no payload indexes
KEYWORD_FIELDS = ("language", "kind", "doc_id")

BackendKind = Literal["qdrant-local", "qdrant-server", "database"]
AliasOperation = tuple[Literal["create", "delete"], str, str]  # (op, alias, collection; "" for delete)


class StoreError(RuntimeError):
    pass


class CollectionNotFound(StoreError):
    """The named collection (build) does not exist, e.g. it was replaced and deleted meanwhile."""


class StoreLockedError(StoreError):
    """The local store's folder is locked by another process (Qdrant local mode allows one)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        super().__init__(
            f"the local Qdrant folder at {self.path} is locked by another process (Qdrant local mode lets one "
            "process open it). Stop that process, or use a store many processes share: the database (the default "
            "without QDRANT_URL) or a Qdrant server (QDRANT_URL)."
        )


@dataclass(frozen=True, slots=True)
class StorePoint:
    point_id: str  # a UUID string (Qdrant ids are unsigned ints or UUIDs)
    dense: Sequence[float] | np.ndarray  # a database row's vector is read as an array over its bytes
    sparse: SparseVector
    payload: dict[str, Any]


class StoreBackend(Protocol):
    kind: BackendKind
    location: str

    @property
    def shared(self) -> bool:
        """Whether other processes may read and write it (a server, the database)."""
        ...

    def close(self) -> None: ...

    def aliases(self) -> dict[str, str]:
        """Alias name -> the collection it points at."""
        ...

    def collections(self, prefix: str) -> list[str]: ...

    def create_collection(self, name: str, *, dim: int, metadata: Mapping[str, Any]) -> None: ...

    def collection_info(self, name: str) -> tuple[int, dict[str, Any]]:
        """(dense dimension, metadata); `CollectionNotFound` when it does not exist."""
        ...

    def count(self, name: str) -> int: ...

    def upsert(self, name: str, points: Sequence[StorePoint]) -> None: ...

    def scroll(self, name: str, *, payload: bool | Sequence[str], vectors: bool) -> Iterator[StorePoint]:
        """Every point of a collection; without `vectors` the dense and sparse parts are empty."""
        ...

    def retrieve(self, name: str, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Payloads by point id (missing ids left out)."""
        ...

    def update_aliases(self, operations: Sequence[AliasOperation]) -> None:
        """Apply alias deletions and creations in one atomic step."""
        ...

    def delete_collection(self, name: str) -> None: ...

    def live_state(self, alias: str) -> tuple[str, int] | None:
        """(the collection `alias` points at, its revision), None without one. A replica reloads when it moves."""
        ...

    def replica(self, name: str, revision: int) -> tuple[list[MemoryRecord], DenseLoader | None, Postings | None]:
        """A collection's points for a `MemoryIndex`, what loads their dense vectors when a search first needs
        them (None: the records carry them), and their postings when saved at `revision` (None: build them)."""
        ...

    def save_postings(self, name: str, revision: int, postings: Postings) -> bool:
        """Keep a collection's postings for the next replicas, if it is still at `revision`."""
        ...

    def revision(self, name: str) -> int:
        """How many times points were written into the collection (a replica of an older one is stale)."""
        ...


def is_not_found(exc: Exception) -> bool:
    if isinstance(exc, CollectionNotFound):
        return True
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code == 404
    return "not found" in str(exc)


class QdrantBackend:
    """A Qdrant server, or qdrant-client's local mode in a folder."""

    def __init__(self, client: QdrantClient, *, local: bool, location: str) -> None:
        self.client = client
        self.kind: BackendKind = "qdrant-local" if local else "qdrant-server"
        self.location = location

    @classmethod
    def open(
        cls, *, path: Path | str | None = None, url: str = "", api_key: str = "", timeout: float = 10.0
    ) -> QdrantBackend:
        if url:
            return cls(QdrantClient(url=url, api_key=api_key or None, timeout=int(timeout)), local=False, location=url)
        if path is None:
            raise ValueError("either url or path is needed")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            # searches run on worker threads; writes are serialised by VectorStore, so the check is not needed
            client = QdrantClient(path=str(folder), force_disable_check_same_thread=True)
        except RuntimeError as exc:
            if "already accessed by another instance" in str(exc):
                raise StoreLockedError(folder) from exc
            raise
        return cls(client, local=True, location=str(folder))

    @property
    def shared(self) -> bool:
        return self.kind == "qdrant-server"

    def close(self) -> None:
        self.client.close()

    def aliases(self) -> dict[str, str]:
        return {alias.alias_name: alias.collection_name for alias in self.client.get_aliases().aliases}

    def collections(self, prefix: str) -> list[str]:
        return sorted(c.name for c in self.client.get_collections().collections if c.name.startswith(prefix))

    def create_collection(self, name: str, *, dim: int, metadata: Mapping[str, Any]) -> None:
        self.client.create_collection(
            name,
            vectors_config={DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            metadata=dict(metadata),
        )
        if self.kind == "qdrant-local":
            fast_local_writes(self.client, name)
        else:
            for field in KEYWORD_FIELDS:
                self.client.create_payload_index(name, field, models.PayloadSchemaType.KEYWORD)

    def collection_info(self, name: str) -> tuple[int, dict[str, Any]]:
        try:
            config = self.client.get_collection(name).config
        except (ValueError, UnexpectedResponse) as exc:
            if is_not_found(exc):
                raise CollectionNotFound(name) from exc
            raise
        vectors = config.params.vectors
        dim = vectors[DENSE].size if isinstance(vectors, dict) else 0
        return dim, dict(config.metadata or {})

    def count(self, name: str) -> int:
        return self.client.count(name, exact=True).count

    def upsert(self, name: str, points: Sequence[StorePoint]) -> None:
        structs = [
            models.PointStruct(
                id=p.point_id,
                vector={
                    DENSE: [float(x) for x in p.dense],
                    SPARSE: models.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values)),
                },
                payload=p.payload,
            )
            for p in points
        ]
        if structs:
            self.client.upsert(name, points=structs, wait=True)

    def scroll(self, name: str, *, payload: bool | Sequence[str], vectors: bool) -> Iterator[StorePoint]:
        offset: Any = None
        with_payload: bool | list[str] = payload if isinstance(payload, bool) else list(payload)
        while True:
            batch, offset = self.client.scroll(
                name, limit=512, offset=offset, with_payload=with_payload, with_vectors=vectors
            )
            for record in batch:
                yield _store_point(record)
            if offset is None:
                return

    def retrieve(self, name: str, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        records = self.client.retrieve(name, ids=list(point_ids), with_payload=True, with_vectors=False)
        return {str(record.id): dict(record.payload or {}) for record in records}

    def update_aliases(self, operations: Sequence[AliasOperation]) -> None:
        changes: list[models.AliasOperations] = [
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=collection, alias_name=alias))
            if op == "create"
            else models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
            for op, alias, collection in operations
        ]
        # one request: the server applies the list atomically, so no search finds the alias missing
        self.client.update_collection_aliases(change_aliases_operations=changes)

    def delete_collection(self, name: str) -> None:
        self.client.delete_collection(name)

    def live_state(self, alias: str) -> tuple[str, int] | None:
        live = self.aliases().get(alias)
        return None if live is None else (live, 0)

    def replica(self, name: str, revision: int) -> tuple[list[MemoryRecord], DenseLoader | None, Postings | None]:
        # local mode holds every vector in memory already: nothing is saved by loading them later
        records = [
            MemoryRecord(point_id=p.point_id, sparse=p.sparse, payload=p.payload, dense=p.dense)
            for p in self.scroll(name, payload=True, vectors=True)
        ]
        return records, None, None

    def save_postings(self, name: str, revision: int, postings: Postings) -> bool:
        return False  # one process: nobody else would load them

    def revision(self, name: str) -> int:
        return 0  # one process sees its own writes; a server answers its own queries


def fast_local_writes(client: QdrantClient, collection: str) -> None:
    """WAL + synchronous=NORMAL on a local-mode collection's SQLite file: local mode commits (and fsyncs) once per
    point. Reaches into qdrant-client internals, so it quietly does nothing if they change: slower, never wrong."""
    try:
        # qdrant-client's private local-mode objects, which its types do not describe
        connection = client._client.collections[collection].storage.storage  # type: ignore[attr-defined]
    except (AttributeError, KeyError):
        return
    if isinstance(connection, sqlite3.Connection):
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")


def _store_point(record: Any) -> StorePoint:
    vectors = record.vector if isinstance(record.vector, dict) else {}
    dense = vectors.get(DENSE)
    sparse = vectors.get(SPARSE)
    return StorePoint(
        point_id=str(record.id),
        dense=dense if isinstance(dense, list) else [],
        sparse=SparseVector(list(sparse.indices), list(sparse.values))
        if isinstance(sparse, models.SparseVector)
        else SparseVector([], []),
        payload=dict(record.payload or {}),
    )
