"""Scheduled syncs queued by several job runners at once (threads with their own connections, as two workers'
runners): a due source gets one job, never two (on PostgreSQL too: run with DATABASE_URL)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from rag.documents.models import IndexJob, Source, SourceKind
from rag.documents.services import source_create, sources_due_enqueue

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_runners_polling_at_once_queue_one_sync_per_due_source() -> None:
    sources = [
        source_create(
            name=f"s{n}", kind=SourceKind.SITEMAP, url=f"https://help{n}.example/sitemap.xml", every=timedelta(hours=1)
        )
        for n in range(3)
    ]
    barrier = threading.Barrier(4)
    queued: list[int] = []
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            barrier.wait(timeout=10)
            queued.extend(job.pk for job in sources_due_enqueue())
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(IndexJob.objects.values_list("source__name", flat=True)) == ["s0", "s1", "s2"]
    assert len(set(queued)) == 3
    for source in Source.objects.all():
        assert source.next_sync_at is not None and source.next_sync_at > timezone.now() + timedelta(minutes=59)
    assert len(sources) == 3
