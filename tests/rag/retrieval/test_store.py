from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models

from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index, chunk_documents, point_id
from rag.retrieval.markdown import Document
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import (
    SEARCH_MODES,
    SPARSE,
    CollectionNotFound,
    StoreError,
    StoreLockedError,
    StorePoint,
    VectorStore,
)
from tests.rag.stores import open_store, store_params

ENCODER = BM25Encoder()


def ask(store: VectorStore, embedder: LexicalEmbedder, query: str, **kwargs: Any) -> list[str]:
    hits = store.search(
        embedder.embed_query(query),
        ENCODER.encode_query(query),
        limit=kwargs.pop("limit", 3),
        **kwargs,
    )
    return [hit.payload["doc_id"] for hit in hits]


def test_empty_store(store: VectorStore, embedder: LexicalEmbedder) -> None:
    assert store.live_collection() is None
    assert store.is_empty()
    assert store.count() == 0
    assert store.metadata() == {}
    for mode in SEARCH_MODES:
        assert ask(store, embedder, "密碼", mode=mode) == []


def test_build_writes_payload_metadata_and_alias(
    store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    report = build_index(documents, store, embedder)
    chunks = chunk_documents(documents)
    assert (report.documents, report.chunks, report.replaced) == (5, len(chunks), None)
    assert store.live_collection() == report.collection
    assert report.collection.startswith(f"{store.alias}__")
    assert store.count() == len(chunks)
    meta = store.metadata()
    assert meta["embedder"] == embedder.name
    assert meta["bm25"]["avgdl"] == pytest.approx(report.avgdl)
    assert meta["chunks"] == len(chunks)
    hit = store.search(None, ENCODER.encode_query("F-103 申請表"), limit=1)[0]
    assert hit.point_id == point_id(hit.payload["chunk_id"])
    payload = hit.payload
    assert payload["kind"] == "form" and payload["form_id"] == "F-103"
    assert payload["tags"] == ["form", "account"]
    assert len(payload["content_hash"]) == 64
    assert {"chunk_id", "doc_id", "title", "url", "heading", "text", "language"} <= set(payload)


def answer_from(store: VectorStore, collection: str, query: str) -> list[str]:
    """A search on one named build, as a query on a server runs once it has resolved the alias."""
    sparse = ENCODER.encode_query(query)
    points = store.client.query_points(
        collection,
        query=models.SparseVector(indices=sparse.indices, values=sparse.values),
        using=SPARSE,
        limit=3,
        with_payload=True,
    ).points
    return [str((point.payload or {})["doc_id"]) for point in points]


@pytest.fixture
def qdrant_queried_store(tmp_path: Path) -> Iterator[VectorStore]:
    """Queries through Qdrant's Query API on the alias, as with a server: local mode's folder, the same code."""
    with VectorStore.open("helpcentre", path=tmp_path / "qdrant-engine", engine="qdrant") as opened:
        yield opened


def test_a_switch_keeps_the_replaced_build_for_queries_in_flight_until_the_next_switch(
    qdrant_queried_store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    store = qdrant_queried_store
    first = build_index(documents, store, embedder)
    in_flight = store.live_collection()  # a query resolved the alias, then the switch happens
    assert in_flight == first.collection
    before = answer_from(store, in_flight, "報名課程")
    assert "zh-enrolment" in before

    second = build_index([d for d in documents if d.doc_id != "zh-enrolment"], store, embedder)
    assert second.replaced == first.collection
    assert answer_from(store, in_flight, "報名課程") == before  # the query in flight still gets its answer
    assert store.previous_collection() == first.collection
    assert store.builds() == sorted([first.collection, second.collection])
    with pytest.raises(StoreError, match="previous build"):
        store.drop(first.collection)
    # new searches go to the new build only
    assert store.live_collection() == second.collection and store.count() == second.chunks
    assert "zh-enrolment" not in ask(store, embedder, "報名課程")

    third = build_index(documents, store, embedder)
    assert third.replaced == second.collection and store.previous_collection() == second.collection
    assert store.builds() == sorted([second.collection, third.collection])  # the first is gone
    with pytest.raises(ValueError, match="not found"):
        answer_from(store, first.collection, "報名課程")


def test_reloading_the_live_build_or_switching_back_keeps_both_builds(
    qdrant_queried_store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    store = qdrant_queried_store
    first = build_index(documents, store, embedder)
    second = build_index(documents, store, embedder)
    assert store.activate(second.collection) == second.collection  # what refresh_live does after descriptions
    assert (store.live_collection(), store.previous_collection()) == (second.collection, first.collection)
    # an operator rolling back to the previous build: it goes live, nothing is deleted
    assert store.activate(first.collection) == second.collection
    assert (store.live_collection(), store.previous_collection()) == (first.collection, second.collection)
    assert store.builds() == sorted([first.collection, second.collection])
    assert store.count() == first.chunks


@pytest.mark.parametrize("store_kind", store_params("database", "qdrant-server"), indirect=True)
def test_a_shared_store_keeps_the_replaced_build_readable_until_the_next_switch(
    store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    """Another worker may be loading its replica of the live build (or a server query may have resolved the
    alias) just as the switch happens: the build it is reading stays whole until the switch after."""
    assert store.keeps_replaced
    first = build_index(documents, store, embedder)
    second = build_index([d for d in documents if d.doc_id != "zh-enrolment"], store, embedder)
    assert (second.replaced, store.previous_collection()) == (first.collection, first.collection)
    assert {p.payload["doc_id"] for p in store.scroll(first.collection)} >= {"zh-enrolment"}
    assert "zh-enrolment" not in ask(store, embedder, "報名課程")
    with pytest.raises(StoreError, match="previous build"):
        store.drop(first.collection)
    third = build_index(documents, store, embedder)
    assert third.replaced == second.collection and store.previous_collection() == second.collection
    assert store.builds() == sorted([second.collection, third.collection])  # the first is gone
    with pytest.raises(Exception) as gone:
        list(store.scroll(first.collection))
    assert isinstance(gone.value, CollectionNotFound) or "not found" in str(gone.value).lower()


@pytest.mark.parametrize("store_kind", store_params("qdrant-local"), indirect=True)
def test_the_memory_engine_deletes_the_replaced_build_at_once_and_a_search_in_flight_keeps_its_copy(
    store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    assert store.use_memory and not store.keeps_replaced  # local mode's default engine
    first = build_index(documents, store, embedder)
    in_flight = store._current_memory()  # what a search running during the switch holds
    assert in_flight is not None

    second = build_index([d for d in documents if d.doc_id != "zh-enrolment"], store, embedder)

    assert store.builds() == [second.collection]  # one build on disk and in the client, not two
    assert store.previous_collection() is None
    scores, matched = in_flight.sparse_scores(ENCODER.encode_query("報名課程"))
    held = [in_flight.payloads[row]["doc_id"] for row, _ in in_flight.top(scores, 3, matched)]
    assert "zh-enrolment" in held  # the search in flight still answers from the build it started on
    assert "zh-enrolment" not in ask(store, embedder, "報名課程")
    assert first.collection not in store.builds()


def test_search_during_a_build_sees_the_old_complete_index(
    store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    old = build_index([d for d in documents if d.doc_id != "zh-enrolment"], store, embedder)
    assert "zh-enrolment" not in ask(store, embedder, "報名課程")
    # a half-written build: created and partly filled, not yet activated
    building = store.create_build(dim=embedder.dim)
    chunks = chunk_documents(documents)[:2]
    vectors, _ = ENCODER.encode_documents([c.embed_text for c in chunks])
    store.upsert(
        building,
        [
            StorePoint(point_id(c.chunk_id), embedder.embed_query(c.embed_text), v, {"doc_id": c.doc_id})
            for c, v in zip(chunks, vectors, strict=True)
        ],
    )
    assert store.live_collection() == old.collection
    assert store.count() == old.chunks
    assert "zh-enrolment" not in ask(store, embedder, "報名課程")
    with pytest.raises(StoreError):
        store.drop(old.collection)  # the live build cannot be dropped
    store.drop(building)
    # then a complete build goes live in one switch
    build_index(documents, store, embedder)
    assert ask(store, embedder, "報名課程", limit=1) == ["zh-enrolment"]


def test_failed_build_is_dropped_and_live_index_kept(
    store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    good = build_index(documents, store, embedder)

    class Broken(LexicalEmbedder):
        def embed_documents(self, texts: object) -> list[list[float]]:
            raise RuntimeError("embedding server down")

    with pytest.raises(RuntimeError, match="embedding server down"):
        build_index(documents, store, Broken(dim=embedder.dim))
    assert store.builds() == [good.collection]
    assert store.live_collection() == good.collection


def test_no_documents_is_refused(store: VectorStore, embedder: LexicalEmbedder) -> None:
    with pytest.raises(ValueError, match="no documents"):
        build_index([], store, embedder)


def test_upsert_refuses_foreign_collections(store: VectorStore) -> None:
    with pytest.raises(StoreError):
        store.upsert("someone_else", [])


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_filters_on_language_and_kind(indexed_store: VectorStore, embedder: LexicalEmbedder, mode: str) -> None:
    docs = ask(indexed_store, embedder, "password 密碼", limit=10, mode=mode, language="en")
    assert docs and all(d.startswith("en-") for d in docs)
    docs = ask(indexed_store, embedder, "帳號 電子郵件", limit=10, mode=mode, kind="form")
    assert docs == ["forms/zh-form-account-data-change"]


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_the_in_memory_replica_matches_qdrant_query_api(
    store: VectorStore, tmp_path: Path, documents: list[Document], embedder: LexicalEmbedder, mode: str
) -> None:
    """The database and local mode answer from numpy; the same request through Qdrant's Query API must rank the
    same."""
    if not store.use_memory:
        pytest.skip("a server answers with Qdrant's Query API itself")
    build_index(documents, store, embedder)
    queries = ["忘記密碼怎麼辦", "How do I reset my password?", "課程報名截止", "classroom approval", "F-103"]
    expected = {
        q: [
            (h.point_id, h.score)
            for h in store.search(embedder.embed_query(q), ENCODER.encode_query(q), limit=5, mode=mode)  # type: ignore[arg-type]
        ]
        for q in queries
    }
    with VectorStore.open("helpcentre", path=tmp_path / "reference", engine="qdrant") as qdrant:
        build_index(documents, qdrant, embedder)
        for q in queries:
            hits = qdrant.search(embedder.embed_query(q), ENCODER.encode_query(q), limit=5, mode=mode)  # type: ignore[arg-type]
            got = [(h.point_id, h.score) for h in hits]
            assert [p for p, _ in got] == [p for p, _ in expected[q]], q
            assert [s for _, s in got] == pytest.approx([s for _, s in expected[q]], rel=1e-4), q


def test_a_locked_local_folder_raises_a_clear_error(tmp_path: Path) -> None:
    with VectorStore.open("helpcentre", path=tmp_path / "q") as store:
        with pytest.raises(StoreLockedError, match="locked by another process") as info:
            VectorStore.open("helpcentre", path=store.location)
        assert info.value.path == Path(store.location)


def test_reopening_keeps_the_index(
    store_kind: str, store: VectorStore, tmp_path: Path, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    report = build_index(documents, store, embedder)
    if store.local:
        store.close()  # local mode: one process, one client at a time
    with open_store(store_kind, tmp_path, alias=store.alias) as again:
        assert again.count() == report.chunks
        assert ask(again, embedder, "忘記密碼", limit=1) == ["zh-password-reset"]


def test_unknown_mode_is_rejected(indexed_store: VectorStore) -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        indexed_store.search(None, ENCODER.encode_query("x"), limit=3, mode="magic")  # type: ignore[arg-type]


def test_point_ids_are_uuid5_of_the_chunk_ids() -> None:
    import uuid

    from rag.retrieval.indexer import _POINT_NAMESPACE

    for chunk_id in ("synthetic/000001#0", "中文/文件#12", "", "x" * 500):
        assert point_id(chunk_id) == str(uuid.uuid5(_POINT_NAMESPACE, chunk_id))
