"""A worker's copy of rows on the change feed: read once, dropped by a change, read again once."""

from __future__ import annotations

import threading

import pytest

from infra.feedcopy import FeedCopy
from infra.models import ChangeGeneration

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_copy_is_read_once_and_again_once_after_a_drop() -> None:
    copy: FeedCopy[list[str]] = FeedCopy("t.copy")
    reads: list[int] = []

    def read() -> list[str]:
        reads.append(1)
        return [f"row {len(reads)}"]

    assert copy.peek() is None
    assert copy.load(read) == ["row 1"]
    assert copy.load(read) == ["row 1"] and copy.peek() == ["row 1"]
    copy.drop("t.copy")  # as the change feed's handler calls it
    assert copy.peek() is None
    assert copy.load(read) == ["row 2"] and len(reads) == 2


def test_loads_at_the_same_time_read_once() -> None:
    copy: FeedCopy[int] = FeedCopy("t.copy")
    started = threading.Barrier(8)
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return 42

    def load() -> None:
        started.wait(5)
        assert copy.load(read) == 42

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert len(reads) == 1


def test_a_bump_drops_this_workers_copy_and_publishes_the_topic(settings) -> None:
    settings.REDIS_URL = ""
    copy: FeedCopy[str] = FeedCopy("t.bumped")
    copy.load(lambda: "old")

    copy.bump()

    assert copy.peek() is None
    assert ChangeGeneration.objects.get(topic="t.bumped").generation == 1
