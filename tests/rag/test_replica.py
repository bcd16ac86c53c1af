"""The replica handler: a worker's copies of the index and the cache follow what other processes write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from infra.changefeed import ChangeWatcher, Registry, change_watch_start, change_watch_stop
from rag.replica import ReplicaSync
from rag.retrieval.db_backend import INDEX_TOPIC
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import load_markdown_dir
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore
from tests.rag.retrieval.conftest import write_corpus
from tests.rag.stores import open_store, unique_alias
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


class Store:
    """A store whose database does not answer until told to."""

    def __init__(self, inner: VectorStore) -> None:
        self.inner = inner
        self.down = False

    def sync(self) -> bool:
        if self.down:
            from django.db import OperationalError

            raise OperationalError("connection refused")
        return self.inner.sync()


def test_a_build_by_another_store_is_served_once_published(tmp_path: Path, settings) -> None:
    settings.REDIS_URL = ""
    alias = unique_alias("sync")
    with open_store("database", tmp_path, alias=alias) as worker, open_store("database", tmp_path, alias=alias) as cmd:
        asyncio.run(follow(worker, cmd, tmp_path))


async def follow(worker: VectorStore, cmd: VectorStore, tmp_path: Path) -> None:
    documents = load_markdown_dir(write_corpus(tmp_path / "corpus"))
    embedder = LexicalEmbedder(dim=64)
    target = Store(worker)

    async def replicas() -> dict[str, Any]:
        return {INDEX_TOPIC: target}

    sync = ReplicaSync(replicas=replicas)
    registry = Registry()
    registry.on_change(INDEX_TOPIC, sync.follow)
    # The table is read once an hour: what reaches the replica is the build's own publish, or a retry.
    watcher = change_watch_start(ChangeWatcher(registry=registry, poll_interval=3600, retry_delay=0.05))
    assert watcher is not None
    try:
        await until(lambda: sync.syncs >= 1)
        report = await asyncio.to_thread(build_index, documents, cmd, embedder)
        await until(lambda: (replica := worker.replica()) is not None and replica[0] == report.collection)
        hits = await asyncio.to_thread(worker.search, None, BM25Encoder().encode_query("報名課程"), limit=1)
        assert hits[0].payload["doc_id"] == "zh-enrolment"

        # the database goes away during a build: the worker keeps serving what it holds, and takes the build in
        # once the database is back, without another publish
        target.down = True
        again = await asyncio.to_thread(build_index, documents, cmd, embedder)
        await until(lambda: watcher.failures >= 2)
        assert (replica := worker.replica()) is not None and replica[0] == report.collection
        assert await asyncio.to_thread(worker.search, None, BM25Encoder().encode_query("報名課程"), limit=1)
        target.down = False
        await until(lambda: (replica := worker.replica()) is not None and replica[0] == again.collection)
    finally:
        await change_watch_stop()
