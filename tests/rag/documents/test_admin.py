"""Admin pages: documents with their chunks, uploads, starting, following and cancelling jobs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from rag.documents.indexing import index_job_execute
from rag.documents.models import BackfillJob, Chunk, Document, IndexJob, JobStatus
from rag.documents.services import index_job_create, job_claim, upload_save
from rag.documents.sources import uploads_dir
from rag.retrieval.store import VectorStore
from tests.rag.documents.conftest import CountingEmbedder

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    """The admin speaks the browser's language, zh-hant when it names none: these tests read it in English."""
    settings.LANGUAGE_CODE = "en"


@pytest.fixture
def indexed(store: VectorStore, embedder: CountingEmbedder) -> IndexJob:
    job = index_job_create()
    job_claim(job=job, runner="test:1")
    return index_job_execute(job=job, store=store, embedder=embedder)


def test_documents_list_filters_searches_and_shows_chunks_with_descriptions(staff: Client, indexed: IndexJob) -> None:
    chunk = Chunk.objects.filter(document__doc_id="zh-enrolment").first()
    assert chunk is not None
    Chunk.objects.filter(pk=chunk.pk).update(
        description_zh="說明如何報名課程", description_en="How to enrol in a course", described_at=timezone.now()
    )
    page = staff.get(
        "/admin/rag_documents/document/", {"language__exact": "en", "q": "enrol"}, HTTP_ACCEPT_LANGUAGE="en"
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert "en-enrolment" in html and "zh-enrolment" not in html
    assert "Upload documents" in html and "Reindex" in html
    page = staff.get("/admin/rag_documents/document/", {"kind__exact": "form", "status__exact": "indexed"})
    assert "forms/zh-form-account-data-change" in page.content.decode()
    document = Document.objects.get(doc_id="zh-enrolment")
    detail = staff.get(f"/admin/rag_documents/document/{document.pk}/change/")
    assert detail.status_code == 200
    assert "說明如何報名課程" in detail.content.decode() and "How to enrol in a course" in detail.content.decode()


def test_upload_saves_into_the_uploads_folder_and_starts_an_index_job(staff: Client, configured: Path) -> None:
    files = [
        SimpleUploadedFile("faq one.md", b"---\ntitle: FAQ\nlanguage: en\n---\n\nAnswer.\n"),
        SimpleUploadedFile("notes.txt", "常見問題".encode()),
    ]
    response = staff.post("/admin/rag_documents/document/upload/", {"files": files, "index_now": "on"})
    assert response.status_code == 302
    job = IndexJob.objects.get()
    assert response["Location"] == f"/admin/rag_documents/indexjob/{job.pk}/change/"
    saved = sorted(p.name for p in uploads_dir().iterdir())
    assert saved == ["faq one.md", "notes.txt"]
    assert sorted(Path(p).name for p in job.paths) == saved
    assert (job.created_from, job.created_by.get_username()) == ("admin", "admin")  # type: ignore[union-attr]


def test_upload_refuses_other_file_types(staff: Client, configured: Path) -> None:
    response = staff.post(
        "/admin/rag_documents/document/upload/", {"files": [SimpleUploadedFile("tool.exe", b"MZ\x90\x00")]}
    )
    assert response.status_code == 200 and "only" in response.content.decode()
    assert not IndexJob.objects.exists()
    assert not uploads_dir().exists() or not any(uploads_dir().iterdir())


def test_start_a_reindex_from_the_admin(staff: Client, corpus: Path) -> None:
    listing = staff.get("/admin/rag_documents/indexjob/")
    assert "Start a reindex" in listing.content.decode()
    refused = staff.post("/admin/rag_documents/indexjob/start/", {"paths": "/etc", "format": "auto"})
    assert refused.status_code == 200 and "outside the corpus folder" in refused.content.decode()
    started = staff.post("/admin/rag_documents/indexjob/start/", {"paths": "zh-enrolment.md\n", "format": "markdown"})
    job = IndexJob.objects.get()
    assert started.status_code == 302 and job.paths == [str((corpus / "zh-enrolment.md").resolve())]
    assert job.format == "markdown" and job.status == JobStatus.PENDING


def test_a_job_page_follows_progress_and_cancels(staff: Client, configured: Path) -> None:
    job = index_job_create()
    job_claim(job=job, runner="host:1")
    IndexJob.objects.filter(pk=job.pk).update(progress_done=3, progress_total=12, stage="embedding")
    page = staff.get(f"/admin/rag_documents/indexjob/{job.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    assert f'data-status-url="/api/v1/rag/index-jobs/{job.pk}"' in html
    assert 'value="25"' in html and "Cancel job" in html
    # Its one inline script carries the nonce the Content-Security-Policy allows (no other inline script runs).
    nonce = re.search(r"script-src [^;]*'nonce-([^']+)'", page["Content-Security-Policy"])
    assert nonce is not None and html.count("<script>") == 0 and f'<script nonce="{nonce.group(1)}">' in html
    listing = staff.get("/admin/rag_documents/indexjob/")
    assert 'http-equiv="refresh"' in listing.content.decode()  # the list refreshes while jobs run
    response = staff.post(f"/admin/rag_documents/indexjob/{job.pk}/cancel/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.cancel_requested


def test_cancel_action_on_the_job_list(staff: Client, configured: Path) -> None:
    jobs = [index_job_create(), index_job_create()]
    response = staff.post(
        "/admin/rag_documents/indexjob/",
        {"action": "cancel_jobs", "_selected_action": [str(j.pk) for j in jobs]},
    )
    assert response.status_code == 302
    assert set(IndexJob.objects.values_list("status", flat=True)) == {JobStatus.CANCELLED}


def test_backfill_is_started_from_the_admin_only_with_an_llm(staff: Client, settings: Any) -> None:
    response = staff.get("/admin/rag_documents/backfilljob/start/", follow=True)
    assert "No LLM is configured" in response.content.decode()
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    response = staff.post("/admin/rag_documents/backfilljob/start/", {"limit": "10"})
    assert response.status_code == 302
    assert BackfillJob.objects.get().limit == 10


def test_non_staff_cannot_reach_the_pages(configured: Path) -> None:
    user = get_user_model().objects.create_user("member")
    client = Client()
    client.force_login(user)
    for url in ("/admin/rag_documents/document/upload/", "/admin/rag_documents/indexjob/start/"):
        assert client.get(url).status_code == 302  # to the admin login


@pytest.mark.parametrize("name", ["..", ".md", "tool.exe", "x" * 10 + ".odt"])
def test_unusable_upload_names_are_refused(configured: Path, name: str) -> None:
    from rag.documents.services import UploadRefused, upload_save

    with pytest.raises(UploadRefused):
        upload_save(name=name, chunks=[b"text"])


def test_a_hidden_upload_name_is_made_visible_and_size_is_bounded(configured: Path) -> None:
    from rag.documents.services import UploadRefused, upload_save

    assert upload_save(name="../../.notes.md", chunks=[b"text"]) == (uploads_dir() / "notes.md").resolve()
    with pytest.raises(UploadRefused, match="larger than"):
        upload_save(name="big.txt", chunks=[b"x" * 1024] * 3, max_bytes=2048)
    assert sorted(p.name for p in uploads_dir().iterdir()) == ["notes.md"]  # no partial file left behind


def test_deleting_documents_asks_first_then_removes_the_file_and_starts_the_reindex(staff: Client) -> None:
    upload = upload_save(name="walrus.md", chunks=[b"---\ntitle: Walrus\nlanguage: en\n---\n\nWalruses.\n"])
    document = Document.objects.create(doc_id="uploads/walrus.md", title="Walrus", language="en", source=str(upload))
    action = {"action": "delete_documents", "_selected_action": [document.pk]}
    page = staff.post("/admin/rag_documents/document/", action, HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 200 and str(upload) in page.content.decode()
    assert upload.exists() and not IndexJob.objects.exists()  # nothing happens before the confirmation

    done = staff.post("/admin/rag_documents/document/", {**action, "confirm": "yes"})
    job = IndexJob.objects.get()
    assert done.status_code == 302 and done["Location"].endswith(f"/indexjob/{job.pk}/change/")
    assert not upload.exists() and job.paths == [str(upload)]


def test_a_document_from_outside_the_indexed_folders_is_not_deleted(staff: Client, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.md"
    outside.write_text("x")
    document = Document.objects.create(doc_id="elsewhere", title="Elsewhere", language="en", source=str(outside))
    action = {"action": "delete_documents", "_selected_action": [document.pk], "confirm": "yes"}
    page = staff.post("/admin/rag_documents/document/", action, HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 200 and "cannot be deleted here" in page.content.decode()
    assert outside.exists() and not IndexJob.objects.exists()
