"""Reads of the semantic cache's records (sync ORM; see rag.semcache.services)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Q, Sum

from rag.semcache.models import CacheEntry, CacheEntryDocument


def cache_entry_ids_citing(*, doc_ids: Iterable[str]) -> list[str]:
    return [
        str(pk)
        for pk in CacheEntryDocument.objects.filter(doc_id__in=list(doc_ids))
        .values_list("entry_id", flat=True)
        .distinct()
    ]


def cache_entry_ids_existing(*, ids: Iterable[str]) -> set[str]:
    ids = list(ids)
    found: set[str] = set()
    for start in range(0, len(ids), 500):  # SQLite caps the number of query parameters
        found.update(
            str(pk) for pk in CacheEntry.objects.filter(pk__in=ids[start : start + 500]).values_list("pk", flat=True)
        )
    return found


def cache_entry_ids_created_before(*, before: float) -> set[str]:
    return {
        str(pk)
        for pk in CacheEntry.objects.filter(created_at__lt=datetime.fromtimestamp(before, tz=UTC)).values_list(
            "pk", flat=True
        )
    }


def cache_entries_summary_get(*, now: datetime) -> dict[str, Any]:
    """Counts for the admin: entries, live and expired, total hits, entries per language (one query each)."""
    totals = CacheEntry.objects.aggregate(
        entries=Count("pk"), expired=Count("pk", filter=Q(expires_at__lte=now)), hits=Sum("hits")
    )
    languages = dict(
        CacheEntry.objects.values_list("language")
        .annotate(n=Count("pk"))
        .order_by("language")
        .values_list("language", "n")
    )
    return {
        "entries": totals["entries"] or 0,
        "expired": totals["expired"] or 0,
        "hits": totals["hits"] or 0,
        "languages": languages,
    }
