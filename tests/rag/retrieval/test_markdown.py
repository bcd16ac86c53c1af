from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rag.retrieval.markdown import (
    FrontMatterError,
    LoadError,
    document_from_text,
    load_markdown_dir,
    load_markdown_paths,
    parse_front_matter,
)
from tests.rag.retrieval.conftest import CORPUS


def test_front_matter_flat_keys_lists_and_quotes() -> None:
    fields, body = parse_front_matter(
        "---\ntitle: \"A: quoted title\"\nlanguage: en\ntags: [a, 'b c', d]\n# a comment\nempty: []\n---\n\n# Body\n"
    )
    assert fields == {"title": "A: quoted title", "language": "en", "tags": ("a", "b c", "d"), "empty": ()}
    assert body == "# Body"


def test_front_matter_allows_bom_and_crlf() -> None:
    fields, body = parse_front_matter("\ufeff---\r\ntitle: T\r\nlanguage: en\r\n---\r\ntext\r\n")
    assert fields["title"] == "T"
    assert body == "text"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("title: T\n", "no front matter"),
        ("---\ntitle: T\nlanguage: en\n", "not closed"),
        ("---\ntitle T\n---\nx", "line 2: expected 'key: value'"),
        ("---\ntitle: T\ntitle: U\n---\nx", "line 3: duplicate key 'title'"),
        ("---\ntags: [a, b\n---\nx", "line 2: list value must end with ']'"),
        ("---\ntags: [a, , b]\n---\nx", "empty item"),
    ],
)
def test_front_matter_errors_name_the_problem(raw: str, message: str) -> None:
    with pytest.raises(FrontMatterError, match=message):
        parse_front_matter(raw)


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("language: en", "'title' is required"),
        ("title: T\nlanguage: fr", "'language' must be one of"),
        ("title: T", "'language' must be one of"),
        ("title: T\nlanguage: en\nlangauge: en", "unknown key"),
        ("title: T\nlanguage: en\nkind: video", "'kind' must be one of"),
        ("title: T\nlanguage: en\nkind: form", "needs a 'form_id'"),
        ("title: [a, b]\nlanguage: en", "'title' must be a single value"),
    ],
)
def test_document_validation(front: str, message: str) -> None:
    with pytest.raises(FrontMatterError, match=message):
        document_from_text(f"---\n{front}\n---\nBody text.", doc_id="x")


def test_document_fields_and_hash() -> None:
    raw = CORPUS["forms/zh-form-account-data-change.md"]
    doc = document_from_text(raw, doc_id="forms/zh-form-account-data-change")
    assert doc.title == "帳號資料變更申請表"
    assert (doc.kind, doc.form_id, doc.form_file) == ("form", "F-103", "forms/account-data-change-request.pdf")
    assert doc.tags == ("form", "account")
    assert doc.language == "zh-hant"
    assert doc.content_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert doc.text.startswith("# 帳號資料變更申請表")
    assert "---" not in doc.text


def test_empty_body_is_an_error() -> None:
    with pytest.raises(FrontMatterError, match="no body"):
        document_from_text("---\ntitle: T\nlanguage: en\n---\n\n", doc_id="x")


def test_markdown_without_front_matter_is_titled_by_its_first_heading() -> None:
    raw = "Last updated in May.\n\n## Opening hours\n\nThe help desk answers from 9 to 5.\n\n# Later heading\n"
    doc = document_from_text(raw, doc_id="guides/hours", source_path="/corpus/guides/hours.md")
    assert (doc.doc_id, doc.title, doc.language, doc.url, doc.kind) == (
        "guides/hours",
        "Opening hours",
        "en",
        "",
        "article",
    )
    assert doc.text == raw.strip()  # the heading stays in the body for the chunker, as under front matter
    assert doc.content_hash == hashlib.sha256(raw.encode()).hexdigest()


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ("忘記密碼時，請在登入頁面點選「忘記密碼」。\n", "重設密碼"),  # no heading: the file name
        ("```\n# not a heading\n```\n\n忘記密碼時請點選連結。\n", "重設密碼"),  # inside a code fence
        (f"# {'很長的標題' * 30}\n\n忘記密碼時請點選連結。\n", "重設密碼"),  # too long to be a title
        ("如何重設密碼\n======\n\n忘記密碼時請點選連結。\n", "如何重設密碼"),  # setext heading
        ("#hashtag is not a heading\n\n### 重設步驟 ###\n\n請點選連結。\n", "重設步驟"),
    ],
)
def test_markdown_without_front_matter_falls_back_to_the_file_name(raw: str, title: str) -> None:
    doc = document_from_text(raw, doc_id="zh/重設密碼", source_path="/corpus/zh/重設密碼.md")
    assert doc.title == title
    assert doc.language == "zh-hant"


def test_markdown_without_front_matter_detects_or_takes_the_language() -> None:
    text = "# 如何重设密码\n\n忘记密码时，请在登录页面点击“忘记密码”，再按照电子邮件中的链接设置新密码。\n"
    assert document_from_text(text, doc_id="x").language == "zh-hans"
    assert document_from_text(text, doc_id="x", language="zh-hant").language == "zh-hant"
    # front matter wins over the caller's language
    framed = "---\ntitle: T\nlanguage: en\n---\n\n" + text
    assert document_from_text(framed, doc_id="x", language="zh-hant").language == "en"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("\n\n---\ntitle: T\nlanguage: en\n---\nbody", "must start with a '---' line"),
        ("---\ntitle: T\nlanguage: en\n", "not closed"),
        ("---\ntitle: T\nlanguage: en\n\nbody without the closing line", "expected 'key: value'"),
        ("\ufeff \n\t\n", "no body"),
    ],
)
def test_a_file_that_opens_front_matter_must_finish_it(raw: str, message: str) -> None:
    # a broken front matter is reported, never indexed as body text
    with pytest.raises(FrontMatterError, match=message):
        document_from_text(raw, doc_id="x")


def test_load_dir_collects_errors_and_keeps_going(corpus_dir: Path) -> None:
    (corpus_dir / "broken.md").write_text("---\ntitle: Broken\nlanguage: en\n", encoding="utf-8")
    (corpus_dir / "plain.md").write_text("# Plain notes\n\nNo front matter, still a document.\n", encoding="utf-8")
    (corpus_dir / "bad-lang.md").write_text("---\ntitle: T\nlanguage: xx\n---\nbody", encoding="utf-8")
    (corpus_dir / "latin1.md").write_bytes("---\ntitle: caf\xe9\n---\n".encode("latin-1"))
    (corpus_dir / "notes.txt").write_text("not markdown", encoding="utf-8")
    (corpus_dir / ".hidden").mkdir()
    (corpus_dir / ".hidden" / "x.md").write_text("junk", encoding="utf-8")
    errors: list[LoadError] = []
    docs = load_markdown_dir(corpus_dir, errors=errors)
    assert sorted(d.doc_id for d in docs) == [
        "en-enrolment",
        "en-password-reset",
        "forms/zh-form-account-data-change",
        "plain",
        "zh-enrolment",
        "zh-password-reset",
    ]
    assert next(d.title for d in docs if d.doc_id == "plain") == "Plain notes"
    reasons = {e.path.name: e.reason for e in errors}
    assert set(reasons) == {"broken.md", "bad-lang.md", "latin1.md"}
    assert "not closed" in reasons["broken.md"]
    assert "'language'" in reasons["bad-lang.md"]
    assert "not UTF-8" in reasons["latin1.md"]
    assert "broken.md: front matter is not closed" in str(errors[[e.path.name for e in errors].index("broken.md")])


def test_doc_ids_are_stable_relative_paths(corpus_dir: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    corpus_dir.rename(moved)
    assert {d.doc_id for d in load_markdown_dir(moved)} >= {"zh-password-reset", "forms/zh-form-account-data-change"}


def test_load_paths_files_missing_and_duplicates(corpus_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "zh-password-reset.md").write_text(CORPUS["zh-password-reset.md"], encoding="utf-8")
    errors: list[LoadError] = []
    docs = load_markdown_paths(
        [corpus_dir, other, corpus_dir / "en-enrolment.md", tmp_path / "missing", corpus_dir / "x.txt"],
        errors=errors,
    )
    assert len(docs) == 5
    messages = [e.reason for e in errors]
    assert sum("duplicate doc_id 'zh-password-reset'" in m for m in messages) == 1
    assert sum("duplicate doc_id 'en-enrolment'" in m for m in messages) == 1
    assert "no such file or folder" in messages
