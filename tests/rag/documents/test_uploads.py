"""Uploads that lose nothing: folder paths kept and made safe, a batch checked whole before anything is saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from rag.documents.models import IndexJob
from rag.documents.services import UploadItem, UploadRefused, upload_relative_path, uploads_save
from rag.documents.sources import uploads_dir
from tests.rag.retrieval.test_office_loaders import write_docx

pytestmark = pytest.mark.django_db

EN = b"<html><head><title>Fees</title></head><body><main><p>Visitors pay NT$ 2,000.</p></main></body></html>"
ZH = "<html><head><title>費用</title></head><body><main><p>校外人士每學分二千元。</p></main></body></html>".encode()


def files_in_uploads() -> list[str]:
    root = uploads_dir()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("../etc/passwd.md", "'..'"),
        ("/etc/x.md", "absolute"),
        ("C:\\\\x.md", "absolute"),
        ("en/\x07bell.md", "control characters"),
        ("en/.git/x.md", "hidden"),
        ("a" * 250 + ".md", "at most"),
        ("tool.exe", "only"),
    ],
)
def test_unsafe_relative_paths_are_refused_with_a_reason(configured: Path, raw: str, reason: str) -> None:
    with pytest.raises(UploadRefused, match=reason):
        upload_relative_path(raw)


def test_the_same_name_in_two_folders_is_two_files_and_a_second_upload_is_an_update(configured: Path) -> None:
    first = uploads_save(
        items=[UploadItem("fees.html", "en/fees.html", [EN]), UploadItem("fees.html", "zh/fees.html", [ZH])]
    )
    assert [(o.path, o.outcome) for o in first.outcomes] == [("en/fees.html", "added"), ("zh/fees.html", "added")]
    assert files_in_uploads() == ["en/fees.html", "zh/fees.html"]
    again = uploads_save(items=[UploadItem("fees.html", "en/fees.html", [EN + b"<p>2026</p>"])])
    assert [(o.path, o.outcome) for o in again.outcomes] == [("en/fees.html", "updated")]


def test_a_batch_with_a_refused_file_saves_nothing_and_names_it(configured: Path, tmp_path: Path) -> None:
    docx = write_docx(tmp_path / "audit.docx").read_bytes()
    batch = uploads_save(
        items=[
            UploadItem("audit.docx", "forms/audit.docx", [docx]),
            UploadItem("broken.docx", "forms/broken.docx", [b"PK\x03\x04 not really"]),
            UploadItem("empty.md", "", [b""]),
        ]
    )
    assert [(o.path, o.outcome) for o in batch.outcomes] == [
        ("forms/audit.docx", "added"),
        ("forms/broken.docx", "refused"),
        ("empty.md", "refused"),
    ]
    assert "not a zip archive" in batch.refused[0].reason and batch.refused[1].reason == "empty file"
    assert files_in_uploads() == [] and batch.saved == []


def test_the_admin_upload_keeps_folder_paths_and_reports_each_file(staff: Client) -> None:
    files = [SimpleUploadedFile("fees.html", EN), SimpleUploadedFile("fees.html", ZH)]
    page = staff.post(
        "/admin/rag_documents/document/upload/",
        {"folder": files, "relative_paths": json.dumps(["site/en/fees.html", "site/zh/fees.html"]), "index_now": "on"},
        HTTP_ACCEPT_LANGUAGE="en",
        follow=True,
    )
    assert "added site/en/fees.html, added site/zh/fees.html" in page.content.decode()
    job = IndexJob.objects.get()
    assert sorted(Path(p).relative_to(uploads_dir().resolve()).as_posix() for p in job.paths) == [
        "site/en/fees.html",
        "site/zh/fees.html",
    ]


def test_the_admin_upload_refuses_the_batch_and_keeps_nothing(staff: Client) -> None:
    files = [SimpleUploadedFile("ok.md", b"# Title\n\nText."), SimpleUploadedFile("x.docx", b"not a zip")]
    page = staff.post("/admin/rag_documents/document/upload/", {"files": files}, HTTP_ACCEPT_LANGUAGE="en")
    text = page.content.decode()
    assert page.status_code == 200 and "Nothing was saved" in text and "x.docx: not a .docx file" in text
    assert files_in_uploads() == [] and not IndexJob.objects.exists()
