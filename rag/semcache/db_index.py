"""The cache's entries kept in the database (the default without a Qdrant server), answered from memory.

Each `CacheEntry` row holds the entry's vector (float32 bytes) beside the question, answer and sources, so the
database is the one place an entry lives: a store is one transaction, a delete (by staff, the purge or the
re-index hook, in any process) removes the one row. Every worker answers lookups from its `Mirror`, loaded at
start-up and kept in step by `sync()`: the rows added since the revision it has, and, when the deletion counter
moved, the ids still there. A server calls `sync()` every half second (rag.replica), so an answer
cached by one worker is a hit on every other within a second.

Everything here blocks: callers run it in a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.db import transaction

from rag.models import StoreRevision
from rag.semcache.guard import KeyTerms
from rag.semcache.index import Candidate, Mirror, Scope, matcher
from rag.semcache.models import CacheEntry
from rag.semcache.services import REVISION_NAME, NewEntry, cache_entries_create, cache_revision_bump

logger = logging.getLogger(__name__)

_F32 = np.dtype("<f4")
_ROW_FIELDS = (
    "id",
    "language",
    "index_version",
    "index_generation",
    "prompt_version",
    "producer",
    "created_at",
    "expires_at",
    "doc_ids",
    "question",
    "normalized_question",
    "answer",
    "sources",
    "vector",
)


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def row_payload(row: dict[str, Any]) -> dict[str, Any]:
    """The payload a lookup needs, from a row (the same keys `SemanticCache` gives a Qdrant point)."""
    return {
        "entry_id": str(row["id"]),
        "language": row["language"],
        "index_version": row["index_version"],
        "index_generation": int(row["index_generation"] or 0),
        "prompt_version": row["prompt_version"],
        "producer": row["producer"],
        "created_at": _epoch(row["created_at"]),
        "expires_at": _epoch(row["expires_at"]),
        "doc_ids": list(row["doc_ids"] or []),
        "question": row["question"],
        "normalized_question": row["normalized_question"],
        "answer": row["answer"],
        "sources": list(row["sources"] or []),
    }


class DatabaseCacheIndex:
    def __init__(self, *, dim: int, embedder_name: str, key_terms: KeyTerms) -> None:
        self.dim = dim
        self.embedder_name = embedder_name
        self.mirror = Mirror(dim, key_terms)
        self._sync_lock = threading.Lock()
        self._revision = -1  # the revision the mirror holds everything up to
        self._deletions = -1

    # --- loading and following ---------------------------------------------------------------------------------

    def open(self) -> None:
        """Load the entries; when they were made with another embedder, delete them first (vectors of another
        model cannot be compared with ours; the cache is only a cache)."""
        with transaction.atomic():
            counters, _ = StoreRevision.objects.select_for_update().get_or_create(name=REVISION_NAME)
            if counters.tag != self.embedder_name:
                if counters.tag or CacheEntry.objects.exists():
                    logger.info("semantic cache entries were made with %r; deleting them", counters.tag or "?")
                    CacheEntry.objects.all().delete()
                    cache_revision_bump(deleted=True)
                StoreRevision.objects.filter(name=REVISION_NAME).update(tag=self.embedder_name)
        self.sync()
        logger.info("semantic cache: %d entries loaded from the database", len(self.mirror))

    def _counters(self) -> tuple[int, int]:
        row = StoreRevision.objects.filter(name=REVISION_NAME).values_list("revision", "deletions").first()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def sync(self) -> bool:
        with self._sync_lock:
            revision, deletions = self._counters()
            if (revision, deletions) == (self._revision, self._deletions):
                return False
            rows = CacheEntry.objects.filter(vector__isnull=False)
            if deletions != self._deletions:
                # something was deleted: the ids still there say what; only rows not held yet are read whole
                present = {str(pk) for pk in rows.values_list("pk", flat=True)}
                held = set(self.mirror.ids())
                with self.mirror.lock:
                    for entry_id in held - present:
                        self.mirror.remove(entry_id)
                added = rows.filter(pk__in=list(present - held)) if len(present - held) < 500 else rows
            else:
                added = rows.filter(revision__gt=self._revision)
            loaded = 0
            for row in added.values(*_ROW_FIELDS).iterator(chunk_size=1000):
                vector = np.frombuffer(bytes(row["vector"]), dtype=_F32)
                if len(vector) != self.dim:
                    continue  # written by another embedder: the purge removes it
                with self.mirror.lock:
                    if str(row["id"]) not in self.mirror:
                        self.mirror.add(str(row["id"]), vector, row_payload(row))
                        loaded += 1
            self._revision, self._deletions = revision, deletions
        if loaded:
            logger.debug("semantic cache: %d entries taken in from the database", loaded)
        return True

    # --- reading -----------------------------------------------------------------------------------------------

    def known_size(self) -> int:
        return len(self.mirror)

    def search(
        self, vector: Sequence[float], scope: Scope, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        return self.mirror.search(vector, scope, now=now, limit=limit, threshold=threshold)

    def search_language(
        self, vector: Sequence[float], language: str, *, now: float, limit: int, threshold: float
    ) -> list[Candidate]:
        return self.mirror.search_language(vector, language, now=now, limit=limit, threshold=threshold)

    def ids(self) -> dict[str, float]:
        """What this process can serve (its copy); the purge drops entries whose rows are gone."""
        return self.mirror.ids()

    def rows_without_vectors(self, *, before: float, vectors: Collection[str]) -> set[str]:
        cutoff = datetime.fromtimestamp(before, tz=UTC)
        unservable = CacheEntry.objects.filter(vector__isnull=True, created_at__lt=cutoff)
        return {str(pk) for pk in unservable.values_list("pk", flat=True)}

    def ids_matching(self, **criteria: Any) -> set[str]:
        matches: Callable[[dict[str, Any]], bool] = matcher(**criteria)
        return self.mirror.ids_matching(matches)

    # --- writing -----------------------------------------------------------------------------------------------

    def add(
        self, entries: Sequence[NewEntry], vectors: Sequence[Sequence[float]], payloads: Sequence[dict[str, Any]]
    ) -> None:
        if not entries:
            return
        blobs = [np.asarray(vector, dtype=_F32).tobytes() for vector in vectors]
        cache_entries_create(entries=entries, vectors=blobs)
        # searchable only once stored: a failed write leaves nothing behind to serve
        with self.mirror.lock:
            for entry, vector, payload in zip(entries, vectors, payloads, strict=True):
                self.mirror.add(entry.entry_id, vector, payload)

    def delete(self, entry_ids: Iterable[str]) -> int:
        """Out of this process's copy (from here on no lookup here returns them); the rows, and with them every
        other worker's copy, go through rag.semcache.services, which calls this first."""
        with self.mirror.lock:
            return sum(self.mirror.remove(str(entry_id)) for entry_id in set(entry_ids))

    def clear(self) -> None:
        with self.mirror.lock:
            self.mirror.clear()
