"""The sources' admin pages: add (checked), list with last and next sync, sync now, pause, per-URL problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from rag.documents.models import Document, IndexJob, JobStatus, Source, SourceKind, SourcePage
from rag.documents.services import source_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    settings.LANGUAGE_CODE = "en"


def test_add_refuses_a_non_http_url_and_a_folder_outside_the_allowed_ones(staff: Client, tmp_path: Path) -> None:
    url = reverse("admin:rag_documents_source_add")
    base = {"max_pages": 10, "rate": 2, "concurrency": 2, "include": "[]", "exclude": "[]"}
    base |= {"pages-TOTAL_FORMS": 0, "pages-INITIAL_FORMS": 0}
    page = staff.post(url, {**base, "name": "x", "kind": SourceKind.WEBSITE, "url": "javascript:alert(1)"})
    assert page.status_code == 200 and "Give an http(s) URL." in page.content.decode()
    page = staff.post(url, {**base, "name": "y", "kind": SourceKind.FOLDER, "folder": "/etc"})
    assert page.status_code == 200 and "outside the corpus folder" in page.content.decode()
    page = staff.post(url, {**base, "name": "ok", "kind": SourceKind.SITEMAP, "url": "https://help.example/sm.xml"})
    assert page.status_code == 302 and Source.objects.filter(name="ok").exists()


def test_list_shows_problems_and_sync_now_queues_one_job(staff: Client) -> None:
    source = source_create(name="help", kind=SourceKind.SITEMAP, url="https://help.example/sitemap.xml")
    gone = "https://help.example/gone.html"
    SourcePage.objects.create(source=source, url=gone, outcome="gone", detail="answered 404")
    SourcePage.objects.create(source=source, url="https://help.example/ok.html", outcome="fetched")
    listing = staff.get(reverse("admin:rag_documents_source_changelist")).content.decode()
    assert "help" in listing and "on request" in listing
    change = staff.get(reverse("admin:rag_documents_source_change", args=[source.pk])).content.decode()
    assert "gone.html" in change and "answered 404" in change and "ok.html" not in change
    action = {"action": "sync_now", "_selected_action": [source.pk]}
    changelist = reverse("admin:rag_documents_source_changelist")
    staff.post(changelist, action)
    staff.post(changelist, action)
    job = IndexJob.objects.get(source=source)
    assert job.status == JobStatus.PENDING and job.created_from == "admin"
    staff.post(changelist, {"action": "pause", "_selected_action": [source.pk]})
    source.refresh_from_db()
    assert source.paused and source.next_sync_at is None


def test_reindexing_a_website_page_syncs_its_source(staff: Client) -> None:

    source = source_create(name="help", kind=SourceKind.SITEMAP, url="https://help.example/sitemap.xml")
    page = Document.objects.create(
        doc_id="web/help/fees.html", title="Fees", language="en", source="https://help.example/fees.html"
    )
    done = staff.post(
        reverse("admin:rag_documents_document_changelist"),
        {"action": "reindex_sources", "_selected_action": [page.pk]},
    )
    job = IndexJob.objects.get(source=source)
    assert done.status_code == 302 and done["Location"].endswith(f"/indexjob/{job.pk}/change/")
