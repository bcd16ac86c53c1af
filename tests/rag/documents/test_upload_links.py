"""A base URL for uploads: given on the admin upload form or the uploads API, held by the uploads source, so each
uploaded document links to base + its path in the uploads folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from rag.documents.models import Document, IndexJob, Source, SourceKind
from rag.documents.services import source_sync_request
from rag.retrieval.store import VectorStore
from tests.rag.documents.conftest import CountingEmbedder
from tests.rag.documents.conftest import run_job as run

pytestmark = pytest.mark.django_db

BASE = "https://help.example.edu/"
PAGE = "<html lang='{lang}'><head><title>{title}</title></head><body><main><p>{text}</p></main></body></html>"
FEES_EN = PAGE.format(lang="en", title="Fees", text="Visitors pay NT$ 2,000.").encode()
FEES_ZH = PAGE.format(lang="zh-Hant", title="費用", text="旁聽每學分二千元。")
FAQ = b"---\ntitle: FAQ\nlanguage: en\nurl: https://elsewhere.example/faq\n---\n\nAnswers.\n"


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    settings.LANGUAGE_CODE = "en"


def links(store: VectorStore) -> dict[str, set[str]]:
    live = store.live_collection()
    assert live is not None
    found: dict[str, set[str]] = {}
    for point in store.scroll(live, payload=["doc_id", "url"]):
        found.setdefault(str(point.payload["doc_id"]), set()).add(str(point.payload.get("url")))
    return found


def batch() -> dict[str, Any]:
    return {
        "folder": [
            SimpleUploadedFile("fees.html", FEES_EN),
            SimpleUploadedFile("fees.html", FEES_ZH.encode()),
            SimpleUploadedFile("faq.md", FAQ),
        ],
        "relative_paths": '["en/fees.html", "zh/fees.html", "faq.md"]',
        "index_now": "on",
    }


def test_the_admin_upload_links_each_file_to_base_plus_its_path(
    staff: Client, store: VectorStore, embedder: CountingEmbedder
) -> None:
    response = staff.post("/admin/rag_documents/document/upload/", {**batch(), "base_url": BASE})

    assert response.status_code == 302
    uploads = Source.objects.get(kind=SourceKind.UPLOADS)
    assert uploads.base_url == BASE
    run(IndexJob.objects.get(), store, embedder)
    found = links(store)
    assert found["uploads/en/fees.html"] == {"https://help.example.edu/en/fees.html"}
    assert found["uploads/zh/fees.html"] == {"https://help.example.edu/zh/fees.html"}
    assert found["uploads/faq"] == {"https://elsewhere.example/faq"}  # its own link wins over the base
    assert Document.objects.get(doc_id="uploads/en/fees.html").url == "https://help.example.edu/en/fees.html"
    page = staff.get("/admin/rag_documents/document/upload/").content.decode()
    assert f'value="{BASE}"' in page  # the form shows the base URL uploads have


def test_a_bad_base_url_is_a_form_error_and_nothing_is_saved(staff: Client, configured: Path) -> None:
    response = staff.post("/admin/rag_documents/document/upload/", {**batch(), "base_url": "javascript:alert(1)"})

    assert response.status_code == 200
    assert "base_url" in response.context["form"].errors
    assert not IndexJob.objects.exists() and not Source.objects.exists()
    assert not (configured / "data" / "uploads" / "en").exists()


def test_a_changed_base_url_relinks_every_upload(staff: Client, store: VectorStore, embedder: CountingEmbedder) -> None:
    staff.post("/admin/rag_documents/document/upload/", {**batch(), "base_url": BASE})
    run(IndexJob.objects.get(), store, embedder)
    one = {"files": [SimpleUploadedFile("notes.txt", b"Opening hours: 9 to 5.")], "index_now": "on"}

    staff.post("/admin/rag_documents/document/upload/", {**one, "base_url": "https://new.example.edu/help/"})

    job = IndexJob.objects.latest("created_at")
    assert [Path(path).name for path in job.paths] == ["uploads"]  # the whole uploads folder
    done = run(job, store, embedder)
    assert (done.added, done.updated) == (1, 2)  # notes.txt added; both fees pages re-linked, faq.md kept
    found = links(store)
    assert found["uploads/en/fees.html"] == {"https://new.example.edu/help/en/fees.html"}
    assert found["uploads/notes.txt"] == {"https://new.example.edu/help/notes.txt"}
    assert found["uploads/faq"] == {"https://elsewhere.example/faq"}


def test_the_uploads_api_takes_a_base_url(staff: Client, store: VectorStore, embedder: CountingEmbedder) -> None:
    response = staff.post(
        "/api/v1/rag/uploads",
        {
            "files": [SimpleUploadedFile("fees.html", FEES_EN), SimpleUploadedFile("fees.html", FEES_ZH.encode())],
            "paths": ["en/fees.html", "zh/fees.html"],
            "base_url": BASE,
        },
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert [f["path"] for f in body["files"]] == ["en/fees.html", "zh/fees.html"]
    assert body["base_url"] == BASE and body["job"]["status"] == "pending"
    run(IndexJob.objects.get(pk=body["job"]["id"]), store, embedder)
    assert links(store)["uploads/zh/fees.html"] == {"https://help.example.edu/zh/fees.html"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"base_url": "ftp://help.example.edu/"}, "base_url"),
        ({"paths": ["a.html", "b.html"]}, "paths"),
        ({"index": "maybe"}, "index"),
    ],
)
def test_the_uploads_api_names_the_bad_field_and_saves_nothing(
    staff: Client, configured: Path, data: dict[str, Any], field: str
) -> None:
    response = staff.post("/api/v1/rag/uploads", {"files": [SimpleUploadedFile("a.html", FEES_EN)], **data})

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert not IndexJob.objects.exists() and not (configured / "data" / "uploads" / "a.html").exists()


def test_the_uploads_api_refuses_a_batch_whole(staff: Client, configured: Path) -> None:
    files = [SimpleUploadedFile("a.html", FEES_EN), SimpleUploadedFile("tool.exe", b"MZ")]
    response = staff.post("/api/v1/rag/uploads", {"files": files, "base_url": BASE})

    assert response.status_code == 400
    refused = [f for f in response.json()["error"]["files"] if f["outcome"] == "refused"]
    assert [f["path"] for f in refused] == ["tool.exe"]
    assert not (configured / "data" / "uploads" / "a.html").exists()
    assert not Source.objects.exists() and not IndexJob.objects.exists()


def test_the_uploads_api_is_for_staff(configured: Path) -> None:
    member = get_user_model().objects.create_user("member")
    client = Client()
    client.force_login(member)
    response = client.post("/api/v1/rag/uploads", {"files": [SimpleUploadedFile("a.html", FEES_EN)]})
    assert response.status_code == 403
    assert not (configured / "data" / "uploads").exists() or not any((configured / "data" / "uploads").iterdir())


def test_removing_the_uploads_source_keeps_the_uploaded_documents(
    staff: Client, store: VectorStore, embedder: CountingEmbedder
) -> None:
    staff.post("/admin/rag_documents/document/upload/", {**batch(), "base_url": BASE})
    run(IndexJob.objects.get(), store, embedder)
    uploads = Source.objects.get(kind=SourceKind.UPLOADS)

    run(source_sync_request(source=uploads, remove=True), store, embedder)

    assert not Source.objects.filter(kind=SourceKind.UPLOADS).exists()
    assert {"uploads/en/fees.html", "uploads/zh/fees.html", "uploads/faq"} <= set(links(store))


def test_a_staff_link_on_an_upload_survives_its_re_upload(
    staff: Client, store: VectorStore, embedder: CountingEmbedder
) -> None:
    staff.post("/admin/rag_documents/document/upload/", {**batch(), "base_url": BASE})
    run(IndexJob.objects.get(), store, embedder)
    fees = Document.objects.get(doc_id="uploads/en/fees.html")
    inline = {"chunks-TOTAL_FORMS": "0", "chunks-INITIAL_FORMS": "0"}
    changed = staff.post(
        f"/admin/rag_documents/document/{fees.pk}/change/", {**inline, "url": "https://www.example.edu/fees"}
    )
    assert changed.status_code == 302
    run(IndexJob.objects.latest("created_at"), store, embedder)

    edited = PAGE.format(lang="en", title="Fees", text="Visitors pay NT$ 2,500.").encode()
    again = {"files": [SimpleUploadedFile("fees.html", edited)], "relative_paths": '["en/fees.html"]'}
    staff.post("/admin/rag_documents/document/upload/", {**again, "base_url": BASE, "index_now": "on"})
    done = run(IndexJob.objects.latest("created_at"), store, embedder)

    assert done.updated == 1
    assert links(store)["uploads/en/fees.html"] == {"https://www.example.edu/fees"}
