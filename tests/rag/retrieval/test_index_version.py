"""The index version: kept by incremental builds (one generation further, with what changed), new on a build
that reuses nothing, stored in the build's metadata and read cheaply."""

from __future__ import annotations

from typing import Any

import pytest

from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index, reindex
from rag.retrieval.markdown import Document
from rag.retrieval.store import MAX_CHANGED_DOCUMENTS, VERSION_KEY, IndexVersion, VectorStore

ALL = {"zh-password-reset", "en-password-reset", "zh-enrolment", "en-enrolment", "forms/zh-form-account-data-change"}


def by_id(documents: list[Document]) -> dict[str, Document]:
    return {document.doc_id: document for document in documents}


def test_a_first_build_starts_a_lineage_named_after_it(indexed_store: VectorStore) -> None:
    version = indexed_store.index_version()

    assert version == IndexVersion(indexed_store.live_collection() or "", 1, {})
    assert indexed_store.metadata()[VERSION_KEY] == {"version": version.version, "generation": 1, "changed": {}}


def test_an_incremental_build_keeps_the_version_and_records_what_changed(
    indexed_store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    first = indexed_store.index_version()
    assert first is not None
    docs = by_id(documents)
    kept = ALL - {"zh-password-reset", "en-enrolment"}

    # zh-password-reset re-embedded (changed), en-enrolment left out (deleted), the rest copied
    report = reindex(indexed_store, embedder, embed=[docs["zh-password-reset"]], copy=kept)

    second = indexed_store.index_version()
    assert report.copied > 0 and report.replaced == first.version
    assert second == IndexVersion(first.version, 2, {"zh-password-reset": 2, "en-enrolment": 2})
    assert second.outdated(["zh-password-reset"], since=1)
    assert second.outdated(["zh-enrolment", "en-enrolment"], since=1)
    assert not second.outdated(["zh-enrolment", "en-password-reset"], since=1)
    assert not second.outdated(["zh-password-reset"], since=2)  # retrieved from the new build

    reindex(
        indexed_store, embedder, embed=[docs["zh-enrolment"]], copy=(kept - {"zh-enrolment"}) | {"zh-password-reset"}
    )

    third = indexed_store.index_version()
    assert third == IndexVersion(first.version, 3, {"zh-password-reset": 2, "en-enrolment": 2, "zh-enrolment": 3})
    assert third.outdated(["zh-password-reset"], since=1) and not third.outdated(["zh-password-reset"], since=2)


def test_a_build_that_copies_nothing_starts_a_new_lineage(
    indexed_store: VectorStore, documents: list[Document], embedder: LexicalEmbedder
) -> None:
    first = indexed_store.index_version()
    assert first is not None
    docs = by_id(documents)

    # what a full reindex does: every document embedded, or re-encoded from its stored text
    report = reindex(indexed_store, embedder, embed=[docs["zh-password-reset"]], reencode=ALL - {"zh-password-reset"})

    version = indexed_store.index_version()
    assert report.copied == 0
    assert version == IndexVersion(report.collection, 1, {}) and version.version != first.version
    assert version.outdated([], since=2)  # an answer from another lineage's later build is never trusted

    build_index(documents, indexed_store, embedder)
    assert indexed_store.index_version() == IndexVersion(indexed_store.live_collection() or "", 1, {})


def test_a_build_made_before_versions_is_its_own_lineage_and_incremental_builds_carry_it() -> None:
    legacy = IndexVersion.of_build({"schema": 1, "embedder": "lexical"}, "helpcentre__20240101t000000000000z")

    assert legacy == IndexVersion("helpcentre__20240101t000000000000z", 1, {})
    assert legacy.successor(["a"]) == IndexVersion(legacy.version, 2, {"a": 2})
    stored = IndexVersion("v", 4, {"a": 2, "b": 4}).to_metadata()
    assert IndexVersion.of_build({VERSION_KEY: stored}, "ignored") == IndexVersion("v", 4, {"a": 2, "b": 4})


def test_too_many_changed_documents_start_a_new_lineage() -> None:
    version = IndexVersion("v", 1, {})

    assert version.successor(f"doc-{i}" for i in range(MAX_CHANGED_DOCUMENTS)) is not None
    assert version.successor(f"doc-{i}" for i in range(MAX_CHANGED_DOCUMENTS + 1)) is None


def test_reading_the_version_reads_a_build_s_metadata_once(
    indexed_store: VectorStore, documents: list[Document], embedder: LexicalEmbedder, monkeypatch: Any
) -> None:
    reads: list[str] = []
    collection_info = indexed_store.backend.collection_info

    def counted(name: str) -> Any:
        reads.append(name)
        return collection_info(name)

    monkeypatch.setattr(indexed_store.backend, "collection_info", counted)
    first = [indexed_store.index_version() for _ in range(5)]
    assert all(version is first[0] for version in first) and reads == [indexed_store.live_collection()]

    docs = by_id(documents)
    reindex(indexed_store, embedder, embed=[docs["zh-enrolment"]], copy=ALL - {"zh-enrolment"})
    reads.clear()
    second = [indexed_store.index_version() for _ in range(5)]

    assert reads == [indexed_store.live_collection()]  # the new build's, once
    assert second[0] is not None and second[0].generation == 2


@pytest.mark.parametrize("changed", [[], ["zh-enrolment"]])
def test_outdated_only_when_a_cited_document_changed_later(changed: list[str]) -> None:
    version = IndexVersion("v", 1, {}).successor(changed)
    assert version is not None

    assert version.outdated(["zh-enrolment", "en-enrolment"], since=1) == bool(changed)
    assert not version.outdated(["en-enrolment"], since=1)
