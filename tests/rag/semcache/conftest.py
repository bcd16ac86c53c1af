"""A vector store of every kind with a small indexed corpus, and semantic caches beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import load_markdown_dir
from rag.retrieval.store import VectorStore
from rag.semcache.cache import SemanticCache, build_semantic_cache
from tests.fake_clock import FakeClock
from tests.rag.retrieval.conftest import write_corpus
from tests.rag.stores import STORE_PARAMS, open_store

PASSWORD_SOURCES = [
    {"ref": 1, "doc_id": "zh-password-reset", "title": "如何重設密碼", "url": "https://help.example/zh/password-reset"}
]
ENROL_SOURCES = [
    {"ref": 1, "doc_id": "zh-enrolment", "title": "如何報名課程", "url": "https://help.example/zh/enrolment"}
]


class PromptVersions:
    """A prompt registry stand-in whose production version a test can move."""

    def __init__(self, version: str = "unified-agent-system@1") -> None:
        self.version = version

    async def __call__(self) -> str:
        return self.version


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_800_000_000.0)  # epoch seconds


@pytest.fixture
def embedder() -> LexicalEmbedder:
    # the production dimensions: the default threshold was measured with them
    return LexicalEmbedder()


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture(params=STORE_PARAMS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each cache test runs beside every kind of store: in the database (the entries' rows hold their vectors) and
    in Qdrant (a collection beside the index)."""
    return str(request.param)


@pytest.fixture
def store(store_kind: str, tmp_path: Path, corpus_dir: Path, embedder: LexicalEmbedder) -> Iterator[VectorStore]:
    with open_store(store_kind, tmp_path) as opened:
        build_index(load_markdown_dir(corpus_dir), opened, embedder)
        yield opened


@pytest.fixture
def make_cache(
    store: VectorStore, embedder: LexicalEmbedder, clock: FakeClock
) -> Iterator[Callable[..., SemanticCache]]:
    built: list[SemanticCache] = []

    def make(**options: Any) -> SemanticCache:
        # background timers far away: tests flush and purge explicitly
        options = {"clock": clock, "flush_interval": 3600.0, "purge_interval": 3600.0, **options}
        # built off the event loop, as the product builds it (opening it reads the database)
        with ThreadPoolExecutor(max_workers=1) as thread:
            cache = thread.submit(build_semantic_cache, store, embedder, index_version_ttl=0.0, **options).result()
        built.append(cache)
        return cache

    yield make
    for cache in built:
        cache.close()


@pytest.fixture
def semantic_cache(make_cache: Callable[..., SemanticCache]) -> SemanticCache:
    return make_cache()


async def remember(
    cache: SemanticCache,
    question: str,
    *,
    language: str = "zh-hant",
    answer: str = "在登入頁點選「忘記密碼」[1]。",
    sources: list[dict[str, Any]] | None = None,
) -> None:
    """Store an answer and wait until the writer thread has written it."""
    await cache.store(
        question, language=language, answer=answer, sources=PASSWORD_SOURCES if sources is None else sources
    )
    assert await asyncio.to_thread(cache.wait_idle, 10.0)
