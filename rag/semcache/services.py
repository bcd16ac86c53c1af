"""Writes of the semantic cache's records (rows); vectors go with them through the process's `SemanticCache`.

Everything here is sync ORM: the cache calls it from its writer thread, the admin from its (sync) views, and
async code through `asyncio.to_thread`. Functions that remove entries take the cache whose vectors must go too;
without one (a process that serves no requests, such as a management shell) only rows are deleted: where the
database holds the vectors too, every worker's copy drops them at its next sync (the deletion counter moves in
the same transaction); with a Qdrant server the serving process drops the orphaned vectors at its next purge.

Every write bumps the cache's `StoreRevision` in its own transaction, and new rows carry the revision that added
them: a worker's copy (rag.semcache.db_index) loads the rows newer than the revision it has, and re-reads the
ids when the deletion counter moved.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F, Q

from infra.changefeed import publish_on_commit
from rag.models import StoreRevision
from rag.semcache.active import active_cache
from rag.semcache.models import CacheEntry, CacheEntryDocument
from rag.semcache.selectors import cache_entry_ids_citing

if TYPE_CHECKING:
    from rag.semcache.cache import SemanticCache

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NewEntry:
    entry_id: str
    question: str
    normalized_question: str
    answer: str
    language: str
    sources: list[dict[str, Any]]
    doc_ids: list[str]
    index_version: str
    prompt_version: str
    created_at: float  # epoch seconds (the cache's clock)
    expires_at: float
    producer: str = ""
    index_generation: int = 0


REVISION_NAME = "semcache"
CACHE_TOPIC = "semcache"  # on the change feed: every worker's copy (rag.replica) takes the change in


def cache_revision_bump(*, deleted: bool = False) -> int:
    """Move the cache's revision (and its deletion counter) inside the caller's transaction; the new revision.

    The UPDATE locks the row until commit, so revisions commit in order: a reader that sees revision r sees every
    row stamped with r or less.
    """
    StoreRevision.objects.get_or_create(name=REVISION_NAME)
    changes: dict[str, Any] = {"revision": F("revision") + 1}
    if deleted:
        changes["deletions"] = F("deletions") + 1
    StoreRevision.objects.filter(name=REVISION_NAME).update(**changes)
    publish_on_commit(CACHE_TOPIC)
    return int(StoreRevision.objects.filter(name=REVISION_NAME).values_list("revision", flat=True).get())


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def cache_entries_create(*, entries: Sequence[NewEntry], vectors: Sequence[bytes] | None = None) -> None:
    """Rows for new entries (with their vectors, float32 bytes, when the database holds them) and their cited
    documents, in one transaction."""
    if vectors is not None and len(vectors) != len(entries):
        raise ValueError("one vector per entry")
    rows = [
        CacheEntry(
            id=entry.entry_id,
            question=entry.question,
            normalized_question=entry.normalized_question,
            answer=entry.answer,
            language=entry.language,
            sources=entry.sources,
            doc_ids=entry.doc_ids,
            index_version=entry.index_version,
            prompt_version=entry.prompt_version,
            producer=entry.producer,
            index_generation=entry.index_generation,
            vector=None if vectors is None else vectors[position],
            created_at=_at(entry.created_at),
            expires_at=_at(entry.expires_at),
        )
        for position, entry in enumerate(entries)
    ]
    documents = [
        CacheEntryDocument(entry_id=entry.entry_id, doc_id=doc_id) for entry in entries for doc_id in entry.doc_ids
    ]
    with transaction.atomic():
        revision = cache_revision_bump()
        for row in rows:
            row.revision = revision
        CacheEntry.objects.bulk_create(rows)
        CacheEntryDocument.objects.bulk_create(documents)


def cache_entry_hits_record(*, hits: Mapping[str, tuple[int, float]]) -> int:
    """Add counted hits ({entry id: (hits, last hit epoch)}) in one transaction; returns rows updated.

    One UPDATE per entry (an entry deleted meanwhile updates nothing), all committed at once.
    """
    updated = 0
    with transaction.atomic():
        for entry_id, (count, last_hit) in hits.items():
            updated += CacheEntry.objects.filter(pk=entry_id).update(hits=F("hits") + count, last_hit_at=_at(last_hit))
    return updated


def _rows_delete(ids: Iterable[str]) -> int:
    ids = list(ids)
    if not ids:
        return 0
    # Documents go by the cascade; count entries only.
    deleted = 0
    with transaction.atomic():
        for start in range(0, len(ids), 500):  # SQLite caps the number of query parameters
            found = CacheEntry.objects.filter(pk__in=ids[start : start + 500]).delete()[1]
            deleted += found.get(CacheEntry._meta.label, 0)
        if deleted:
            cache_revision_bump(deleted=True)
    return deleted


def cache_entries_delete(*, ids: Iterable[str], cache: SemanticCache | None = None) -> int:
    """Delete entries, vectors first (so a lookup cannot return an entry whose row is gone); returns rows deleted."""
    ids = [str(entry_id) for entry_id in ids]
    cache = cache or _active()
    if cache is not None:
        cache.forget(ids)
    return _rows_delete(ids)


def cache_entries_delete_all(*, cache: SemanticCache | None = None) -> int:
    """Empty the cache: every vector and every row ("flush all" in the admin)."""
    cache = cache or _active()
    if cache is not None:
        cache.forget_all()
    with transaction.atomic():
        deleted = CacheEntry.objects.all().delete()[1].get(CacheEntry._meta.label, 0)
        cache_revision_bump(deleted=True)
    logger.info("semantic cache flushed: %d entries deleted", deleted)
    return deleted


def cache_entries_invalidate_for_documents(doc_ids: Iterable[str], *, cache: SemanticCache | None = None) -> int:
    """Delete every entry that cites one of `doc_ids` (they were re-indexed, so the answer may be out of date).

    `doc_ids` is positional so the function can be registered as a re-index hook as it is. Blocking (ORM and
    vector store): from async code, run it in a thread.
    """
    wanted = sorted({str(doc_id) for doc_id in doc_ids if doc_id})
    if not wanted:
        return 0
    cache = cache or _active()
    ids = set(cache_entry_ids_citing(doc_ids=wanted))
    if cache is not None:
        # The vectors know what they cite too: this also catches an entry whose row was never written.
        ids |= cache.ids_citing(wanted)
    deleted = cache_entries_delete(ids=ids, cache=cache)
    logger.info("semantic cache: %d entries invalidated for %d re-indexed documents", deleted, len(wanted))
    return deleted


def cache_entries_purge(
    *, now: float, index_version: str | None, producers: Collection[str] | None = None
) -> list[str]:
    """Delete rows that expired, belong to another index version or were written by a producer no longer
    configured (None: keep any); returns their ids (for their vectors)."""
    stale = Q(expires_at__lte=_at(now))
    if index_version:
        stale |= ~Q(index_version=index_version)
    if producers is not None:
        stale |= ~Q(producer__in=sorted(producers))
    ids = [str(pk) for pk in CacheEntry.objects.filter(stale).values_list("pk", flat=True)]
    _rows_delete(ids)
    return ids


def _active() -> SemanticCache | None:
    return active_cache()
