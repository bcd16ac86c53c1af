"""Fixtures for the documents app: a bilingual corpus in a tmp folder, a store of its own, settings pointing at
both, and an embedder that counts what it embeds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from rag.documents.indexing import index_job_execute
from rag.documents.models import IndexJob, JobStatus
from rag.documents.services import job_claim
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.store import VectorStore, open_store_from_settings
from tests.rag.retrieval.conftest import CORPUS, write_corpus


class CountingEmbedder:
    """The real LexicalEmbedder, counting the texts it embeds for documents (queries are not counted)."""

    def __init__(self, inner: LexicalEmbedder | None = None) -> None:
        self.inner = inner or LexicalEmbedder(dim=256)
        self.texts: list[str] = []
        self.calls = 0
        self.fail_after: int | None = None  # raise on the call after this many

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("embedding server went away")
        self.calls += 1
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    def reset(self) -> None:
        self.texts.clear()
        self.calls = 0


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture
def configured(settings: Any, tmp_path: Path, corpus: Path, private_index: str) -> Path:
    """Settings pointing at the tmp corpus, a tmp data folder (uploads) and a store of the test's own; no LLM, no
    server."""
    settings.CORPUS_DIR = corpus
    settings.DATA_DIR = tmp_path / "data"
    settings.EMBEDDING_BASE_URL = ""
    settings.LLM_BASE_URL = ""
    settings.ASK_SERVER_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    (tmp_path / "data").mkdir(exist_ok=True)
    return tmp_path


@pytest.fixture
def store(configured: Path) -> Iterator[VectorStore]:
    with open_store_from_settings() as opened:
        yield opened


def doc_ids_of(store: VectorStore) -> set[str]:
    """Every doc_id in the live build."""
    live = store.live_collection()
    if live is None:
        return set()
    return {str(point.payload.get("doc_id")) for point in store.scroll(live, payload=["doc_id"])}


__all__ = ["CORPUS", "CountingEmbedder", "doc_ids_of", "write_corpus"]


@pytest.fixture
def staff(configured: Path) -> Client:
    """A logged-in superuser's client of the admin and the staff APIs."""
    user = get_user_model().objects.create_superuser("admin", email="a@example.com", password=None)
    client = Client()
    client.force_login(user)
    return client


def run_job(job: IndexJob, store: VectorStore, embedder: Any) -> IndexJob:
    """Claim `job` as the store's owner and run it here; it must succeed."""
    assert job_claim(job=job, runner="test:1", store_owner=True)
    done = index_job_execute(job=job, store=store, embedder=embedder)
    assert done.status == JobStatus.SUCCEEDED, done.error + done.log
    return done
