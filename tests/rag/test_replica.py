"""The replica sync task: a worker's copies of the index and the cache follow what other processes write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rag.replica import ReplicaSync
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


def test_a_build_by_another_process_is_served_after_the_next_check(tmp_path: Path) -> None:
    alias = unique_alias("sync")
    with open_store("database", tmp_path, alias=alias) as worker, open_store("database", tmp_path, alias=alias) as cmd:
        asyncio.run(follow(worker, cmd, tmp_path))


async def follow(worker: VectorStore, cmd: VectorStore, tmp_path: Path) -> None:
    documents = load_markdown_dir(write_corpus(tmp_path / "corpus"))
    embedder = LexicalEmbedder(dim=64)
    target = Store(worker)

    async def replicas() -> tuple[Any, Any]:
        return target, None

    sync = ReplicaSync(replicas=replicas, interval=0.01)
    task = asyncio.create_task(sync.run())
    try:
        await until(lambda: sync.checks >= 1)
        report = await asyncio.to_thread(build_index, documents, cmd, embedder)
        await until(lambda: (replica := worker.replica()) is not None and replica[0] == report.collection)
        hits = await asyncio.to_thread(worker.search, None, BM25Encoder().encode_query("報名課程"), limit=1)
        assert hits[0].payload["doc_id"] == "zh-enrolment"

        # the database goes away: the worker keeps serving what it holds, and follows again when it is back
        target.down = True
        await until(lambda: sync.failures >= 1)  # a check in flight when it went may still have succeeded
        checks = sync.checks
        await until(lambda: sync.failures >= 5)
        assert sync.checks == checks and not task.done()
        assert await asyncio.to_thread(worker.search, None, BM25Encoder().encode_query("報名課程"), limit=1)
        target.down = False
        again = await asyncio.to_thread(build_index, documents, cmd, embedder)
        await until(lambda: (replica := worker.replica()) is not None and replica[0] == again.collection)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
