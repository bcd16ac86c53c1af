"""The database store from several processes at once: each answers from its own replica and follows the others.

Two `VectorStore`s on one database stand for two workers (or a worker and a command): what one builds, switches
or writes in place, the other serves after its next `sync()`, and until then it keeps serving a whole build.
"""

from __future__ import annotations

import pytest

from rag.models import IndexBuild
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index, describe_points, live_payloads, refresh_live
from rag.retrieval.markdown import Document
from rag.retrieval.memory_index import MemoryIndex
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore
from tests.rag.stores import open_store, unique_alias

ENCODER = BM25Encoder()
pytestmark = pytest.mark.django_db(transaction=True)


def ask(store: VectorStore, query: str, limit: int = 3) -> list[str]:
    hits = store.search(None, ENCODER.encode_query(query), limit=limit)
    return [hit.payload["doc_id"] for hit in hits]


@pytest.fixture
def two(tmp_path):
    alias = unique_alias("replica")
    with open_store("database", tmp_path, alias=alias) as first, open_store("database", tmp_path, alias=alias) as other:
        yield first, other


def test_a_build_made_by_one_is_served_by_the_other_after_its_sync(
    two: tuple[VectorStore, VectorStore], documents: list[Document], embedder: LexicalEmbedder
) -> None:
    writer, reader = two
    assert ask(reader, "報名課程") == [] and reader.sync() is False  # nothing built yet
    first = build_index([d for d in documents if d.doc_id != "zh-enrolment"], writer, embedder)
    assert reader.sync() is True and (replica := reader.replica()) is not None and replica[0] == first.collection
    assert "zh-enrolment" not in ask(reader, "報名課程")

    second = build_index(documents, writer, embedder)
    # until it syncs, the reader keeps serving the whole build it has
    assert "zh-enrolment" not in ask(reader, "報名課程")
    assert reader.sync() is True
    assert (replica := reader.replica()) is not None and replica[0] == second.collection
    assert ask(reader, "報名課程", limit=1) == ["zh-enrolment"]
    assert reader.sync() is False  # nothing moved since


def test_a_check_that_finds_nothing_new_is_one_query(
    two: tuple[VectorStore, VectorStore],
    documents: list[Document],
    embedder: LexicalEmbedder,
    django_assert_num_queries,
) -> None:
    writer, reader = two
    build_index(documents, writer, embedder)
    reader.sync()
    with django_assert_num_queries(1):
        assert reader.sync() is False


def test_writes_into_the_live_build_reach_the_other_replica(
    two: tuple[VectorStore, VectorStore], documents: list[Document], embedder: LexicalEmbedder
) -> None:
    writer, reader = two
    build_index(documents, writer, embedder)
    reader.sync()
    assert ask(reader, "獨角獸") == []
    point = reader.search(None, ENCODER.encode_query("報名課程"), limit=1)[0].point_id
    describe_points(writer, embedder, {point: ("獨角獸課程的說明", "a unicorn course")}, described_at="2026-11-25")
    refresh_live(writer)
    assert ask(writer, "獨角獸", limit=1) == ["zh-enrolment"]
    assert reader.sync() is True  # the build's revision moved
    assert ask(reader, "獨角獸", limit=1) == ["zh-enrolment"]
    assert live_payloads(reader, [point])[point]["description_en"] == "a unicorn course"


def test_a_worker_loads_the_postings_the_builder_saved_instead_of_sorting_them_again(
    two: tuple[VectorStore, VectorStore],
    documents: list[Document],
    embedder: LexicalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer, reader = two
    report = build_index(documents, writer, embedder)
    build = IndexBuild.objects.get(name=report.collection)
    assert build.postings is not None and build.postings_revision == build.revision

    def never(*args: object) -> None:
        raise AssertionError("the postings were built again")

    monkeypatch.setattr(MemoryIndex, "_build_postings", never)
    assert reader.sync() is True
    query = ENCODER.encode_query("報名課程 password")
    assert [(h.point_id, h.score) for h in reader.search(None, query, limit=5)] == [
        (h.point_id, h.score) for h in writer.search(None, query, limit=5)
    ]


def test_postings_saved_before_a_write_in_place_are_not_used_after_it(
    two: tuple[VectorStore, VectorStore], documents: list[Document], embedder: LexicalEmbedder
) -> None:
    writer, reader = two
    build_index(documents, writer, embedder)
    point = writer.search(None, ENCODER.encode_query("報名課程"), limit=1)[0].point_id
    # written in place, and not yet published by its writer (refresh_live saves the new postings)
    describe_points(writer, embedder, {point: ("獨角獸課程", "unicorn course")}, described_at="2026-11-25")
    build = IndexBuild.objects.get(name=writer.live_collection())
    assert build.postings_revision is not None and build.postings_revision < build.revision
    assert reader.sync() is True
    assert ask(reader, "獨角獸", limit=1) == ["zh-enrolment"]  # built from the points as they are now
