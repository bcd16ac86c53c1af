"""One document's chunks, in the document's order, from every kind of store and through the retriever."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index, chunk_documents
from rag.retrieval.markdown import Document, load_markdown_dir
from rag.retrieval.memory_index import MemoryIndex, MemoryRecord
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.sparse import SparseVector
from rag.retrieval.store import VectorStore
from tests.rag.retrieval.conftest import CORPUS, write_corpus
from tests.rag.stores import open_store

VERBS = ("Open", "Fill in", "Sign", "Scan", "Upload", "Confirm")
# Six sections large enough to be a chunk each: their point ids (UUIDs) sort in another order than the steps.
STEPS_ARTICLE = "\n\n".join(
    [
        "---\ntitle: How to apply for study leave\nurl: https://help.example/en/study-leave\nlanguage: en\n---",
        "# How to apply for study leave",
        *(
            f"## Step {number}: {verb} the application\n\n"
            + " ".join([f"In step {number} you {verb.lower()} the application and check each field first."] * 5)
            for number, verb in enumerate(VERBS, start=1)
        ),
    ]
)
DOC = "en-study-leave"


@pytest.fixture
def step_documents(tmp_path: Path) -> list[Document]:
    return load_markdown_dir(write_corpus(tmp_path / "corpus", {**CORPUS, f"{DOC}.md": STEPS_ARTICLE}))


def expected_ids(documents: list[Document]) -> list[str]:
    chunks = [chunk for chunk in chunk_documents(documents) if chunk.doc_id == DOC]
    return [chunk.chunk_id for chunk in sorted(chunks, key=lambda chunk: chunk.ordinal)]


def chunk_ids(store: VectorStore, doc_id: str, limit: int = 50) -> list[str]:
    return [hit.payload["chunk_id"] for hit in store.document_points(doc_id, limit=limit)]


def test_a_documents_points_come_in_its_order(
    store: VectorStore, step_documents: list[Document], embedder: LexicalEmbedder
) -> None:
    build_index(step_documents, store, embedder)
    expected = expected_ids(step_documents)
    assert len(expected) == 6
    assert chunk_ids(store, DOC) == expected
    assert chunk_ids(store, DOC, limit=2) == expected[:2]
    assert chunk_ids(store, "no-such-document") == []


def test_the_qdrant_engine_reads_them_by_a_payload_filter(
    tmp_path: Path, step_documents: list[Document], embedder: LexicalEmbedder
) -> None:
    # the code path of a Qdrant server (its own queries, not the in-memory replica), in local mode
    with open_store("qdrant-local", tmp_path, engine="qdrant") as store:
        assert not store.use_memory
        assert chunk_ids(store, DOC) == []  # no index yet
        build_index(step_documents, store, embedder)
        expected = expected_ids(step_documents)
        assert chunk_ids(store, DOC) == expected
        assert chunk_ids(store, DOC, limit=3) == expected[:3]


@pytest.fixture
def steps_store(store: VectorStore, step_documents: list[Document], embedder: LexicalEmbedder) -> VectorStore:
    build_index(step_documents, store, embedder)
    return store


async def test_the_retriever_gives_them_as_chunks(steps_store: VectorStore, embedder: LexicalEmbedder) -> None:
    # read on a worker thread: the event loop never waits on the store
    chunks = await StoreRetriever(steps_store, embedder).document_chunks(DOC, limit=50)
    assert [chunk.heading.rsplit(" > ", 1)[-1] for chunk in chunks] == [
        f"Step {number}: {verb} the application" for number, verb in enumerate(VERBS, start=1)
    ]
    assert {chunk.doc_id for chunk in chunks} == {DOC}
    assert all(chunk.title == "How to apply for study leave" for chunk in chunks)


def test_a_doc_id_is_read_from_the_payload_not_from_its_text() -> None:
    quoting = {"text": 'A passage quoting "doc_id": "b" in its text.', "doc_id": 'a "quoted" id', "ordinal": 0}
    records = [
        MemoryRecord(point_id="p1", sparse=SparseVector([], []), payload=quoting),
        MemoryRecord(point_id="p2", sparse=SparseVector([], []), payload={"doc_id": "b", "ordinal": 0}),
    ]
    index = MemoryIndex(records, dim=4)
    assert index.document_rows('a "quoted" id') == [0]
    assert index.document_rows("b") == [1]
    assert index.document_rows("c") == []
