"""The chat page, a client's conversations, form downloads and the forms CSV export."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.http import StreamingHttpResponse
from django.test import Client

from chatbot import views
from chatbot.models import Conversation, Message

FORM_DOC = """---
title: {title}
url: https://help.example/{form_id}
language: {language}
kind: form
form_id: {form_id}
form_file: {form_file}
---

How to fill in {form_id}.
"""


@pytest.fixture
def corpus(tmp_path: Path, settings) -> Path:
    root = tmp_path / "corpus"
    (root / "forms").mkdir(parents=True)
    forms = [
        ("F-101", "學習時數補登申請表", "zh-hant", "F-101.pdf"),
        ("F-101", "Learning Hours Correction Request", "en", "F-101.pdf"),
        ("F-102", '=HYPERLINK("http://x")', "en", "F-102 reissue.docx"),
    ]
    for form_id, title, language, form_file in forms:
        name = f"{language}-{form_id}.md"
        (root / name).write_text(
            FORM_DOC.format(title=title, language=language, form_id=form_id, form_file=form_file), encoding="utf-8"
        )
    (root / "en-article.md").write_text("---\ntitle: An article\nlanguage: en\n---\n\nText.\n", encoding="utf-8")
    (root / "forms" / "F-101.pdf").write_bytes(b"%PDF-1.4 fake")
    (root / "forms" / "F-102 reissue.docx").write_bytes(b"PK fake docx")
    (root / "forms" / ".hidden.pdf").write_bytes(b"secret")
    (root / "secret.txt").write_text("outside forms/", encoding="utf-8")
    settings.CORPUS_DIR = root
    return root


def test_a_form_downloads_with_its_content_type(client: Client, corpus: Path) -> None:
    response = client.get("/forms/F-101.pdf")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/pdf"
    assert "attachment" in response["Content-Disposition"] and "F-101.pdf" in response["Content-Disposition"]
    assert isinstance(response, StreamingHttpResponse)
    assert b"".join(response.streaming_content) == b"%PDF-1.4 fake"
    docx = client.get("/forms/F-102%20reissue.docx")
    assert docx.status_code == 200
    assert docx["Content-Type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.mark.parametrize(
    "path",
    [
        "/forms/../secret.txt",
        "/forms/%2e%2e/secret.txt",
        "/forms/..%2fsecret.txt",
        "/forms/%2e%2e%2fsecret.txt",
        "/forms/.hidden.pdf",
        "/forms//etc/passwd",
        "/forms/missing.pdf",
        "/forms/",
    ],
)
def test_nothing_outside_the_forms_folder_is_served(client: Client, corpus: Path, path: str) -> None:
    assert client.get(path).status_code == 404


def test_a_symlink_out_of_the_forms_folder_is_refused(client: Client, corpus: Path) -> None:
    (corpus / "forms" / "link.txt").symlink_to(corpus / "secret.txt")
    assert client.get("/forms/link.txt").status_code == 404


def read_csv(content: bytes) -> list[dict[str, str]]:
    text = content.decode("utf-8")
    assert text.startswith("\ufeff"), "Excel needs the BOM to read UTF-8"
    return list(csv.DictReader(io.StringIO(text[1:])))


def test_csv_export_lists_the_requested_forms(client: Client, corpus: Path) -> None:
    response = client.get("/api/v1/rag/forms/export.csv", {"ids": "F-101,F-999"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert 'filename="forms.csv"' in response["Content-Disposition"]
    rows = read_csv(response.content)
    assert rows == [
        {
            "form_id": "F-101",
            "title": "學習時數補登申請表",  # the default language, zh-hant
            "url": "https://help.example/F-101",
            "download_url": "http://testserver/forms/F-101.pdf",
        }
    ]


def test_csv_export_without_ids_has_every_form_once_in_the_language_asked(client: Client, corpus: Path) -> None:
    rows = read_csv(client.get("/api/v1/rag/forms/export.csv?lang=en").content)
    assert [row["form_id"] for row in rows] == ["F-101", "F-102"]
    assert rows[0]["title"] == "Learning Hours Correction Request"
    # A title that a spreadsheet would run as a formula is written as text.
    assert rows[1]["title"].startswith("'=")
    assert rows[1]["download_url"] == "http://testserver/forms/F-102%20reissue.docx"


def test_csv_export_of_only_unknown_ids_is_just_the_header(client: Client, corpus: Path) -> None:
    assert read_csv(client.get("/api/v1/rag/forms/export.csv?ids=NOPE").content) == []


def test_the_form_catalogue_is_read_once_until_the_corpus_changes(
    client: Client, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []
    real = views.load_markdown_dir

    def counted(path: Path) -> Any:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(views, "load_markdown_dir", counted)
    monkeypatch.setattr(views, "_catalogue", None)
    views.form_catalogue()
    views.form_catalogue()
    assert len(calls) == 1
    (corpus / "en-F-103.md").write_text(
        FORM_DOC.format(title="New", language="en", form_id="F-103", form_file="forms/F-103.pdf"), encoding="utf-8"
    )
    assert "F-103" in {form.form_id for form in views.form_catalogue()}
    assert len(calls) == 2


def test_the_demo_corpus_forms_export_links_files_that_download(client: Client) -> None:
    rows = read_csv(client.get("/api/v1/rag/forms/export.csv").content)
    assert [row["form_id"] for row in rows] == ["F-101", "F-102", "F-103", "F-104", "F-105"]
    for row in rows:
        path = row["download_url"].removeprefix("http://testserver")
        response = client.get(path)
        assert response.status_code == 200, path
        assert response["Content-Type"] == "application/pdf"


@pytest.mark.django_db
def test_conversation_list_shows_only_the_clients_own(client: Client) -> None:
    mine, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    own = Conversation.objects.create(client_id=f"anon:{mine}", title="my question")
    Conversation.objects.create(client_id=f"anon:{theirs}", title="their question")
    client.cookies["hc_client"] = mine
    data = client.get("/api/v1/chat/conversations").json()
    assert [c["id"] for c in data["conversations"]] == [str(own.pk)]
    assert data["conversations"][0]["title"] == "my question"


@pytest.mark.django_db
def test_conversation_list_of_a_new_client_is_empty_and_sets_the_cookie(client: Client) -> None:
    Conversation.objects.create(client_id="anon:" + uuid.uuid4().hex, title="someone")
    response = client.get("/api/v1/chat/conversations")
    assert response.json() == {"conversations": []}
    assert response.cookies["hc_client"]["httponly"]


@pytest.mark.django_db
def test_conversation_messages_are_only_shown_to_their_client(client: Client) -> None:
    mine = uuid.uuid4().hex
    conversation = Conversation.objects.create(client_id=f"anon:{mine}", title="q")
    Message.objects.create(conversation=conversation, role="user", content="q", request_id="r1")
    Message.objects.create(conversation=conversation, role="assistant", content="a", request_id="r1")

    client.cookies["hc_client"] = mine
    data = client.get(f"/api/v1/chat/conversations/{conversation.pk}").json()
    assert [(m["role"], m["content"]) for m in data["messages"]] == [("user", "q"), ("assistant", "a")]

    client.cookies["hc_client"] = uuid.uuid4().hex
    response = client.get(f"/api/v1/chat/conversations/{conversation.pk}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert client.get(f"/api/v1/chat/conversations/{uuid.uuid4()}").status_code == 404
    assert client.get("/api/v1/chat/conversations/not-a-uuid").status_code == 404


@pytest.mark.django_db
def test_a_client_renames_its_conversation_keeping_its_place_in_the_list() -> None:
    client = Client(enforce_csrf_checks=True)  # as a browser: the API must not need a CSRF token
    mine = uuid.uuid4().hex
    conversation = Conversation.objects.create(client_id=f"anon:{mine}", title="how do i reset")
    before = Conversation.objects.get(pk=conversation.pk).updated_at
    client.cookies["hc_client"] = mine
    url = f"/api/v1/chat/conversations/{conversation.pk}"
    response = client.patch(url, {"title": "  Password\nreset  "}, content_type="application/json")
    assert response.status_code == 200 and response.json()["title"] == "Password reset"
    stored = Conversation.objects.get(pk=conversation.pk)
    assert (stored.title, stored.updated_at) == ("Password reset", before)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        ('{"title": ""}', "application/json", 400, "title must be a non-empty string"),
        ('{"title": 3}', "application/json", 400, "title must be a non-empty string"),
        ('{"title": "' + "x" * 201 + '"}', "application/json", 400, "at most 200 characters"),
        ("{", "application/json", 400, "not valid JSON"),
        ('{"title": "x"}', "text/plain", 415, "application/json"),
    ],
)
def test_a_bad_rename_is_refused_naming_what_was_wrong(
    client: Client, body: str, content_type: str, status: int, words: str
) -> None:
    mine = uuid.uuid4().hex
    conversation = Conversation.objects.create(client_id=f"anon:{mine}", title="kept")
    client.cookies["hc_client"] = mine
    response = client.patch(f"/api/v1/chat/conversations/{conversation.pk}", body, content_type=content_type)
    assert response.status_code == status
    assert words in response.json()["error"]["message"]
    assert Conversation.objects.get(pk=conversation.pk).title == "kept"


@pytest.mark.django_db
def test_a_client_deletes_its_conversation_and_no_one_elses() -> None:
    client = Client(enforce_csrf_checks=True)
    mine, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    own = Conversation.objects.create(client_id=f"anon:{mine}", title="mine")
    Message.objects.create(conversation=own, role="user", content="q", request_id="r1")
    other = Conversation.objects.create(client_id=f"anon:{theirs}", title="theirs")
    client.cookies["hc_client"] = mine

    assert client.delete(f"/api/v1/chat/conversations/{other.pk}").status_code == 404
    assert (
        client.patch(
            f"/api/v1/chat/conversations/{other.pk}", {"title": "x"}, content_type="application/json"
        ).status_code
        == 404
    )
    assert Conversation.objects.get(pk=other.pk).title == "theirs"
    assert client.delete(f"/api/v1/chat/conversations/{own.pk}").status_code == 204
    # gone for the visitor (listed nowhere, deleted once), kept for staff with its messages
    assert client.get("/api/v1/chat/conversations").json()["conversations"] == []
    assert client.get(f"/api/v1/chat/conversations/{own.pk}").status_code == 404
    assert client.delete(f"/api/v1/chat/conversations/{own.pk}").status_code == 404
    kept = Conversation.objects.get(pk=own.pk)
    assert kept.hidden_at is not None and Message.objects.filter(request_id="r1").exists()


@pytest.mark.django_db  # the page reads the organisation's name and words
def test_the_chat_page_sets_the_client_cookie_once(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    cookie = response.cookies["hc_client"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
    content = response.content.decode()
    assert 'id="chat-config"' in content and "/ws/chat/" in content
    again = client.get("/")
    assert "hc_client" not in again.cookies


def test_health_names_the_service(client: Client) -> None:
    assert client.get("/api/v1/health").json() == {"status": "ok", "service": "helpcentre-chatbot"}


def test_the_chat_script_is_served(client: Client) -> None:
    from django.contrib.staticfiles import finders

    assert finders.find("chat/chat.js") and finders.find("chat/chat.css")


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/admin/login/"])
def test_pages_carry_a_content_security_policy_that_runs_only_our_scripts(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    policy = dict(part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))
    assert policy["default-src"] == "'self'" and policy["object-src"] == "'none'"
    assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"]
    assert policy["frame-ancestors"] == "'none'" and policy["connect-src"] == "'self'"


def test_the_favicon_is_served(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
    assert response.content.startswith(b"<svg")
