"""Incremental builds in rag.retrieval.indexer, on a store of their own (no Django)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag.retrieval.indexer import (
    IndexCancelled,
    build_index,
    describe_points,
    live_documents,
    live_payloads,
    point_id,
    refresh_live,
    reindex,
    stored_context,
)
from rag.retrieval.markdown import Document, load_markdown_dir
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore
from tests.rag.documents.conftest import CountingEmbedder, doc_ids_of, write_corpus

ENCODER = BM25Encoder()


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[VectorStore]:
    with VectorStore.open("helpcentre", path=tmp_path / "qdrant") as opened:
        yield opened


@pytest.fixture
def documents(tmp_path: Path) -> list[Document]:
    return load_markdown_dir(write_corpus(tmp_path / "corpus"))


def vectors(store: VectorStore) -> dict[str, Any]:
    live = store.live_collection()
    assert live is not None
    records, _ = store.client.scroll(live, limit=1000, with_payload=True, with_vectors=True)
    return {str(r.id): r.vector for r in records}


def edited(document: Document, extra: str) -> Document:
    from dataclasses import replace

    return replace(document, text=document.text + "\n\n" + extra, content_hash=document.content_hash[:-4] + "beef")


def test_copied_documents_keep_their_vectors_and_only_the_rest_is_embedded(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    first = reindex(own_store, embedder, embed=documents)
    before = vectors(own_store)
    changed = edited(documents[0], "新增的說明段落。")
    embedder.reset()

    report = reindex(own_store, embedder, embed=[changed], copy={d.doc_id for d in documents[1:]})

    assert report.replaced == first.collection
    assert report.embedded == len(embedder.texts) > 0
    assert all("新增的說明段落" in text or changed.title in text for text in embedder.texts)
    rewritten = {point_id(f"{changed.doc_id}#{i}") for i in range(20)}
    assert report.copied == len(set(before) - rewritten)
    after = vectors(own_store)
    for point in set(before) - rewritten:
        # Qdrant normalises cosine vectors on write, so a copy may differ in the last float32 bit
        assert after[point]["dense"] == pytest.approx(before[point]["dense"], abs=1e-6)
        assert after[point]["bm25"] == before[point]["bm25"]
    assert live_documents(own_store)[changed.doc_id].content_hash == changed.content_hash


def test_documents_left_out_are_deleted(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    reindex(own_store, embedder, embed=documents)
    gone = documents[1].doc_id
    embedder.reset()
    report = reindex(own_store, embedder, embed=[], copy={d.doc_id for d in documents if d.doc_id != gone})
    assert gone not in doc_ids_of(own_store)
    assert doc_ids_of(own_store) == {d.doc_id for d in documents} - {gone}
    assert embedder.calls == 0
    assert report.documents == len(documents) - 1


def test_reencoding_from_stored_text_gives_the_vectors_of_a_fresh_build(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    reindex(own_store, embedder, embed=documents)
    before = vectors(own_store)
    report = reindex(own_store, embedder, embed=[], reencode={d.doc_id for d in documents})
    assert report.reencoded == len(before)
    after = vectors(own_store)
    for point, vector in before.items():
        assert after[point]["dense"] == pytest.approx(vector["dense"], abs=1e-6)


def test_context_of_builds_made_before_it_was_stored() -> None:
    assert stored_context({"title": "如何重設密碼", "heading": "如何重設密碼？ > 重設密碼步驟"}) == (
        "如何重設密碼？ > 重設密碼步驟"
    )
    assert stored_context({"title": "Forms", "heading": "Steps"}) == "Forms > Steps"
    assert stored_context({"title": "Forms", "heading": ""}) == "Forms"


def test_a_cancelled_build_is_dropped_and_the_live_index_stays(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    first = build_index(documents[:2], own_store, embedder)
    calls = 0

    def stop_after_first_batch() -> bool:
        nonlocal calls
        calls += 1
        return calls > 1

    with pytest.raises(IndexCancelled):
        reindex(own_store, embedder, embed=documents, batch_size=2, should_stop=stop_after_first_batch)
    assert own_store.live_collection() == first.collection
    assert own_store.builds() == [first.collection]
    assert doc_ids_of(own_store) == {d.doc_id for d in documents[:2]}


def test_a_failing_build_is_dropped_and_the_live_index_stays(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    first = build_index(documents[:2], own_store, embedder)
    embedder.fail_after = embedder.calls + 1
    with pytest.raises(RuntimeError, match="went away"):
        reindex(own_store, embedder, embed=documents, batch_size=2)
    assert own_store.builds() == [first.collection]
    assert doc_ids_of(own_store) == {d.doc_id for d in documents[:2]}


def test_an_empty_index_is_refused(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    first = build_index(documents, own_store, embedder)
    with pytest.raises(ValueError, match="would be empty"):
        reindex(own_store, embedder, embed=[])
    assert own_store.live_collection() == first.collection


def test_copying_from_another_vector_space_is_refused(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    build_index(documents, own_store, embedder)
    other = CountingEmbedder(inner=type(embedder.inner)(dim=128))
    with pytest.raises(ValueError, match="same vector space"):
        reindex(own_store, other, embed=[], copy={documents[0].doc_id})


def _shared_corpus(root: Path, names: list[str], marker: str = "") -> list[Document]:
    files = {
        f"{name}.md": f"---\ntitle: Zebra crossing {name}\nlanguage: en\n---\n\n# Zebra {name}\n\n"
        f"Every zebra article mentions zebra. Article {name} {marker}.\n"
        for name in names
    }
    return load_markdown_dir(write_corpus(root, files))


@pytest.mark.parametrize("engine", ["memory", "qdrant"])
def test_searches_during_a_reindex_see_the_old_or_the_new_index_never_a_mix(tmp_path: Path, engine: str) -> None:
    building = threading.Event()  # the new build is being written: set from inside it, by its embedder
    switching = threading.Event()  # the build is complete and the alias is about to move
    searched = threading.Event()  # a search has finished
    searched_during_build = threading.Event()  # five searches have run whole while the build was written
    reindexed = threading.Event()  # the reindex has returned
    searched_after = threading.Event()  # a search that started after the reindex returned has finished
    slow = CountingEmbedder()
    inner = slow.embed_documents

    def embed_slowly(texts: Any) -> list[list[float]]:
        building.set()
        searched_during_build.wait(timeout=10)  # the build stays half written while searches run
        return inner(texts)

    slow.embed_documents = embed_slowly  # type: ignore[method-assign]
    old_docs = _shared_corpus(tmp_path / "old", ["a", "b", "c", "d", "e", "f"])
    new_docs = _shared_corpus(tmp_path / "new", ["a", "b", "g", "h"], marker="revised")
    keep = {"c", "d"}  # unchanged: copied
    with VectorStore.open("helpcentre", path=tmp_path / "qdrant", engine=engine) as store:  # type: ignore[arg-type]
        reindex(store, CountingEmbedder(), embed=old_docs)  # the same vector space, without the flag
        activate = store.activate

        def activate_once_marked(collection: str) -> str | None:
            switching.set()
            return activate(collection)

        store.activate = activate_once_marked  # type: ignore[method-assign]
        old_set = frozenset(d.doc_id for d in old_docs)
        new_set = frozenset({"a", "b", "g", "h"} | keep)
        query = ENCODER.encode_query("zebra")
        seen: list[frozenset[str]] = []
        during_build: list[frozenset[str]] = []  # searches that started and ended while the build was written
        errors: list[BaseException] = []
        done = threading.Event()

        def search() -> None:
            try:
                while not done.is_set():
                    started_during = building.is_set() and not switching.is_set()
                    started_after = reindexed.is_set()
                    hits = store.search(None, query, limit=100)
                    found = frozenset(h.payload["doc_id"] for h in hits)
                    seen.append(found)
                    searched.set()
                    if started_during and not switching.is_set():
                        during_build.append(found)
                        if len(during_build) >= 5:
                            searched_during_build.set()
                    if started_after:
                        searched_after.set()
            except BaseException as exc:
                errors.append(exc)

        searcher = threading.Thread(target=search)
        searcher.start()
        try:
            assert searched.wait(timeout=10)  # the old index was searched before the build began
            reindex(store, slow, embed=new_docs, copy=keep, batch_size=1)
            reindexed.set()
            assert searched_after.wait(timeout=10)  # and the new one after the switch
        finally:
            done.set()
            searcher.join()
        assert not errors, errors
        assert set(seen) <= {old_set, new_set}, set(seen) - {old_set, new_set}
        assert seen[0] == old_set and seen[-1] == new_set
        # the searches really ran while the build was half written, and saw the old index whole
        assert len(during_build) >= 5, len(during_build)
        assert set(during_build) == {old_set}


def test_descriptions_become_searchable_text_of_their_chunk(
    own_store: VectorStore, documents: list[Document], embedder: CountingEmbedder
) -> None:
    reindex(own_store, embedder, embed=documents)
    zh = next(d for d in documents if d.doc_id == "zh-enrolment")
    target = point_id(f"{zh.doc_id}#0")
    query = ENCODER.encode_query("wombat enrolment")
    assert "zh-enrolment" not in {h.payload["doc_id"] for h in own_store.search(None, query, limit=3)}

    descriptions = {target: ("報名課程的方法", "How to enrol: wombat")}
    missing = describe_points(own_store, embedder, descriptions, described_at="2026-01-01T00:00:00+00:00")
    assert missing == []
    refresh_live(own_store)
    hits = own_store.search(None, query, limit=3)
    assert hits[0].payload["doc_id"] == "zh-enrolment"
    assert hits[0].payload["description_en"] == "How to enrol: wombat"

    # a later reindex keeps them: copied with the vectors, or carried over when the unchanged text is re-embedded
    reindex(own_store, embedder, embed=[], copy={d.doc_id for d in documents})
    assert live_payloads(own_store, [target])[target]["description_zh"] == "報名課程的方法"
    report = reindex(own_store, embedder, embed=documents)
    assert live_payloads(own_store, [target])[target]["described_at"] == "2026-01-01T00:00:00+00:00"
    chunk = next(c for c in report.chunks_by_doc["zh-enrolment"] if c.point_id == target)
    assert chunk.description_en == "How to enrol: wombat"
    assert own_store.search(None, query, limit=1)[0].payload["doc_id"] == "zh-enrolment"
