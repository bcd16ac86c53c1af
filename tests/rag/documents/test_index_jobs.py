"""Index jobs through the services: incremental plans, rows, hooks, cancel, failures and bad files."""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from rag.documents.hooks import on_documents_reindexed
from rag.documents.indexing import index_job_execute
from rag.documents.models import Chunk, Document, DocumentStatus, IndexJob, JobStatus
from rag.documents.services import JobTracker, index_job_create, job_cancel, job_claim
from rag.retrieval.store import VectorStore
from tests.rag.documents.conftest import CORPUS, CountingEmbedder, doc_ids_of

pytestmark = pytest.mark.django_db

ALL = {"zh-password-reset", "en-password-reset", "zh-enrolment", "en-enrolment", "forms/zh-form-account-data-change"}


def run_job(store: VectorStore, embedder: Any, **options: Any) -> IndexJob:
    job = index_job_create(**options)
    assert job_claim(job=job, runner="test:1", store_owner=True)
    return index_job_execute(job=job, store=store, embedder=embedder)


def rows() -> dict[str, tuple[str, str, int]]:
    return {d.doc_id: (d.status, d.content_hash, d.chunk_count) for d in Document.objects.all()}


def chunk_rows() -> list[tuple[str, str, str]]:
    return sorted(Chunk.objects.values_list("chunk_id", "point_id", "text_preview"))


@pytest.fixture
def changed_ids() -> Iterator[list[frozenset[str]]]:
    calls: list[frozenset[str]] = []
    unsubscribe = on_documents_reindexed(calls.append)
    yield calls
    unsubscribe()


def test_first_job_indexes_the_corpus_and_mirrors_it_in_rows(store: VectorStore, embedder: CountingEmbedder) -> None:
    job = run_job(store, embedder)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.added, job.updated, job.unchanged, job.deleted, job.skipped) == (5, 0, 0, 0, 0)
    assert doc_ids_of(store) == ALL == set(rows())
    assert job.chunks == store.count() == Chunk.objects.count() == job.chunks_embedded
    form = Document.objects.get(doc_id="forms/zh-form-account-data-change")
    assert (form.kind, form.form_id, form.language, form.source_format) == ("form", "F-103", "zh-hant", "markdown")
    assert form.source.endswith("forms/zh-form-account-data-change.md")
    assert job.report["documents"] == 5 and job.collection == store.live_collection()
    assert job.progress_done == job.progress_total == job.chunks


def test_only_changed_and_new_documents_are_embedded_and_deleted_ones_removed(
    store: VectorStore,
    embedder: CountingEmbedder,
    corpus: Path,
    changed_ids: list[frozenset[str]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run_job(store, embedder)
    (corpus / "en-enrolment.md").write_text(CORPUS["en-enrolment.md"] + "\nA new paragraph about waiting lists.\n")
    (corpus / "zh-password-reset.md").unlink()
    (corpus / "en-new.md").write_text("---\ntitle: Certificates\nlanguage: en\n---\n\nDownload your certificate.\n")
    embedder.reset()

    with django_capture_on_commit_callbacks(execute=True):
        job = run_job(store, embedder)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.added, job.updated, job.unchanged, job.deleted) == (1, 1, 3, 1)
    embedded_docs = {text.split("\n")[0] for text in embedder.texts}
    assert all("enrol" in t.lower() or "Certificates" in t for t in embedded_docs), embedded_docs
    assert job.chunks_embedded == len(embedder.texts)
    assert doc_ids_of(store) == ALL - {"zh-password-reset"} | {"en-new"}
    assert rows()["zh-password-reset"][0] == DocumentStatus.DELETED
    assert not Chunk.objects.filter(document__doc_id="zh-password-reset").exists()
    assert changed_ids == [frozenset({"en-enrolment", "zh-password-reset"})]
    assert job.report["updated"] == ["en-enrolment"] and job.report["deleted"] == ["zh-password-reset"]


def test_an_unchanged_corpus_embeds_nothing_and_full_embeds_everything(
    store: VectorStore, embedder: CountingEmbedder
) -> None:
    first = run_job(store, embedder)
    embedder.reset()
    again = run_job(store, embedder)
    assert embedder.calls == 0
    assert (again.unchanged, again.chunks_embedded, again.chunks) == (5, 0, first.chunks)
    full = run_job(store, embedder, full=True)
    assert full.chunks_embedded == first.chunks == len(embedder.texts)
    assert (full.unchanged, full.updated) == (5, 0)


def test_an_index_built_before_the_rows_existed_is_reused(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    from rag.retrieval.indexer import build_index
    from rag.retrieval.markdown import load_markdown_dir

    build_index(load_markdown_dir(corpus), store, embedder)
    embedder.reset()
    job = run_job(store, embedder)
    assert embedder.calls == 0
    assert job.unchanged == 5 and set(rows()) == ALL
    assert Chunk.objects.count() == store.count()


def test_cancel_mid_job_leaves_the_live_index_and_the_rows_as_they_were(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    run_job(store, embedder)
    live, ids, before_rows, before_chunks = store.live_collection(), doc_ids_of(store), rows(), chunk_rows()
    for name, text in CORPUS.items():
        (corpus / name).write_text(text + "\n更新的內容。\n")
    job = index_job_create()
    assert job_claim(job=job, runner="test:1", store_owner=True)
    inner = embedder.embed_documents

    def cancel_on_first_batch(texts: Any) -> Any:
        job_cancel(job=job)  # what the API, the admin or Ctrl-C does, from anywhere
        return inner(texts)

    embedder.embed_documents = cancel_on_first_batch  # type: ignore[method-assign]
    # the build is one batch here: the cancel is caught by the last check, before the switch
    job = index_job_execute(job=job, store=store, embedder=embedder)
    assert job.status == JobStatus.CANCELLED
    assert "live index is unchanged" in job.error
    assert store.live_collection() == live and store.builds() == [live]
    assert doc_ids_of(store) == ids
    assert rows() == before_rows and chunk_rows() == before_chunks


def test_cancel_between_batches_stops_the_build_before_the_next_batch(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    run_job(store, embedder)
    live, ids, before_rows, before_chunks = store.live_collection(), doc_ids_of(store), rows(), chunk_rows()
    for name, text in CORPUS.items():
        (corpus / name).write_text(text + "\n更新的內容。\n")
    embedder.reset()
    embedder.batch_size = 1  # type: ignore[attr-defined]  # one chunk per batch, each followed by a cancel check
    # the tracker reads cancel_requested with its progress writes, at most once per interval
    interval = inspect.signature(JobTracker).parameters["interval"].default
    job = index_job_create()
    assert job_claim(job=job, runner="test:1", store_owner=True)
    inner = embedder.embed_documents

    def cancel_during_first_batch(texts: Any) -> Any:
        job_cancel(job=job)
        # so the progress write after this batch is due, and reads the cancel. A fixed sleep, kept: the tracker's
        # write interval (time itself) is what is tested, and it reads its own clock, so there is no condition.
        time.sleep(interval + 0.05)
        return inner(texts)

    embedder.embed_documents = cancel_during_first_batch  # type: ignore[method-assign]
    job = index_job_execute(job=job, store=store, embedder=embedder)
    assert job.status == JobStatus.CANCELLED
    # stopped after the first batch, not at the check before the switch with everything embedded
    assert (embedder.calls, job.progress_done) == (1, 1) and job.progress_total >= len(CORPUS)
    assert store.live_collection() == live and store.builds() == [live]
    assert doc_ids_of(store) == ids
    assert rows() == before_rows and chunk_rows() == before_chunks


def test_a_failing_job_leaves_the_live_index_and_the_rows_as_they_were(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    run_job(store, embedder)
    live, before_rows = store.live_collection(), rows()
    (corpus / "en-enrolment.md").write_text(CORPUS["en-enrolment.md"] + "\nMore.\n")
    embedder.fail_after = embedder.calls
    job = run_job(store, embedder)
    assert job.status == JobStatus.FAILED
    assert "embedding server went away" in job.error and "embedding server went away" in job.log
    assert store.builds() == [live] and rows() == before_rows


def test_bad_files_are_skipped_with_a_reason_and_the_rest_indexed(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    bad = {
        "binary.md": b"---\ntitle: x\x00\x01\x02\n---\n\x00\xff body",
        "empty.md": b"",
        "blank.txt": b"  \n\t\n",
        "unknown-encoding.txt": b"caf\x81 menu \x9d\x8f prices",  # unassigned in every supported encoding
        "unclosed-front-matter.md": b"---\ntitle: x\nlanguage: en\n",
        "broken.pdf": b"%PDF-1.4\n1 0 obj << /Type /Catalog >>\ngarbage without xref or trailer",
        "not-a.pdf": b"<html>this is not a pdf</html>",
    }
    for name, data in bad.items():
        (corpus / name).write_bytes(data)
    # a hidden file is never a document; a Big5 file is text in a known encoding; Markdown without front matter
    # (what staff upload from elsewhere) is an ordinary document
    (corpus / ".hidden.md").write_text("---\ntitle: hidden\nlanguage: en\n---\n\nnever read\n")
    (corpus / "big5.md").write_bytes("---\ntitle: 忘記密碼\nlanguage: zh-hant\n---\n\n請重設密碼。\n".encode("big5"))
    (corpus / "plain.md").write_text("# Opening hours\n\nThe help desk answers from 9 to 5.\n")
    job = run_job(store, embedder)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert doc_ids_of(store) == ALL | {"big5", "plain"}
    plain = Document.objects.get(doc_id="plain")
    assert (plain.title, plain.language, plain.url, plain.status) == ("Opening hours", "en", "", DocumentStatus.INDEXED)
    reasons = {Path(item["path"]).name: item["reason"] for item in job.report["skipped_files"]}
    assert set(reasons) == set(bad)
    assert job.skipped == len(bad)
    assert "binary" in reasons["binary.md"]
    assert "empty" in reasons["empty.md"]
    assert "whitespace" in reasons["blank.txt"]
    assert "encoding" in reasons["unknown-encoding.txt"]
    assert "front matter is not closed" in reasons["unclosed-front-matter.md"]
    assert "PDF" in reasons["broken.pdf"] and "PDF" in reasons["not-a.pdf"]
    for name in reasons:
        assert f"/{name}: " in job.log


def test_an_unreadable_file_is_skipped_and_keeps_its_indexed_version(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    run_job(store, embedder)
    path = corpus / "en-enrolment.md"
    if os.geteuid() == 0:
        # root reads files whatever their mode; reading this one fails with EIO
        path.unlink()
        path.symlink_to("/proc/self/mem")
    else:
        path.chmod(0)
    try:
        job = run_job(store, embedder)
    finally:
        path.unlink()
    assert job.status == JobStatus.SUCCEEDED
    assert "en-enrolment.md: cannot read the file" in job.log
    assert "en-enrolment" in doc_ids_of(store)
    assert rows()["en-enrolment"][0] == DocumentStatus.STALE


def test_a_file_broken_since_its_last_index_keeps_its_indexed_version(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    run_job(store, embedder)
    (corpus / "en-enrolment.md").write_bytes(b"\x00\x01 binary garbage")
    job = run_job(store, embedder)
    assert job.status == JobStatus.SUCCEEDED
    assert "en-enrolment" in doc_ids_of(store)
    document = Document.objects.get(doc_id="en-enrolment")
    assert document.status == DocumentStatus.STALE and "binary" in document.status_detail
    assert job.report["stale"] == ["en-enrolment"] and job.deleted == 0


def test_a_job_on_some_paths_leaves_the_other_documents_alone(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    run_job(store, embedder)
    target = corpus / "forms" / "zh-form-account-data-change.md"
    target.write_text(CORPUS["forms/zh-form-account-data-change.md"] + "\n補充說明。\n")
    embedder.reset()
    job = run_job(store, embedder, paths=[str(target)])
    # the same doc_id as when the whole corpus folder is indexed
    assert (job.updated, job.added, job.deleted) == (1, 0, 0)
    assert doc_ids_of(store) == ALL
    target.unlink()
    job = run_job(store, embedder, paths=[str(target)])
    assert job.status == JobStatus.SUCCEEDED, job.error
    # a deleted file is counted as deleted, not also as a file skipped ("no such file or folder")
    assert (job.deleted, job.skipped) == (1, 0)
    assert doc_ids_of(store) == ALL - {"forms/zh-form-account-data-change"}


def test_uploads_get_their_own_ids_and_survive_a_corpus_reindex(
    store: VectorStore, embedder: CountingEmbedder, configured: Path
) -> None:
    from rag.documents.sources import uploads_dir

    run_job(store, embedder)
    uploads_dir().mkdir(parents=True)
    upload = uploads_dir() / "en-password-reset.md"
    upload.write_text(CORPUS["en-password-reset.md"].replace("How to reset", "Resetting"))
    job = run_job(store, embedder, paths=[str(upload)])
    assert job.added == 1 and "uploads/en-password-reset" in doc_ids_of(store)
    job = run_job(store, embedder)  # the corpus folder only
    assert job.deleted == 0 and "uploads/en-password-reset" in doc_ids_of(store)
    upload.unlink()
    job = run_job(store, embedder, paths=[str(uploads_dir())])
    assert job.deleted == 1 and doc_ids_of(store) == ALL


def test_no_documents_fails_and_changes_nothing(store: VectorStore, embedder: CountingEmbedder, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    job = run_job(store, embedder, paths=[str(tmp_path / "empty")])
    assert job.status == JobStatus.FAILED and "no documents to index" in job.error
    missing = run_job(store, embedder, paths=[str(tmp_path / "nowhere")])
    assert missing.status == JobStatus.FAILED and "no such file or folder" in missing.error
    assert store.live_collection() is None and not Document.objects.exists()


def test_if_empty_does_nothing_when_the_index_has_chunks(store: VectorStore, embedder: CountingEmbedder) -> None:
    first = run_job(store, embedder, if_empty=True)
    assert first.added == 5
    embedder.reset()
    second = run_job(store, embedder, if_empty=True)
    assert second.status == JobStatus.SUCCEEDED and second.report == {"if_empty": True, "chunks": first.chunks}
    assert store.live_collection() == first.collection and embedder.calls == 0
    assert "nothing to do" in second.log


def test_the_log_is_bounded(store: VectorStore, embedder: CountingEmbedder, corpus: Path) -> None:
    from rag.documents.models import JOB_LOG_LIMIT

    for i in range(400):
        (corpus / f"broken-{i:03d}-{'x' * 60}.md").write_text("---\ntitle: never closed\n")
    job = run_job(store, embedder)
    assert job.status == JobStatus.SUCCEEDED
    assert len(job.log) <= JOB_LOG_LIMIT and job.log.startswith("[earlier lines dropped]")
    assert job.skipped == 400 and len(job.report["skipped_files"]) == 200
    assert job.finished_at is not None and job.finished_at <= timezone.now()
