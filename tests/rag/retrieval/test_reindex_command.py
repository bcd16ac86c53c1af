from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from rag.retrieval.store import open_store_from_settings
from tests.rag.retrieval.conftest import write_corpus

# Every run records an index job row.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def configured(settings: object, tmp_path: Path, private_index: str) -> Path:
    corpus = write_corpus(tmp_path / "corpus")
    settings.CORPUS_DIR = corpus  # type: ignore[attr-defined]
    settings.EMBEDDING_BASE_URL = ""  # type: ignore[attr-defined]
    return tmp_path


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("reindex", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def live_count(tmp_path: Path) -> int:
    with open_store_from_settings() as store:
        return store.count()


def test_indexes_corpus_dir_and_reports(configured: Path, private_index: str) -> None:
    out, err = run()
    assert "Indexed 5 documents into" in out
    assert f"live as {private_index}" in out
    assert err == ""
    chunks = int(out.split(" documents into ")[1].split(" chunks")[0])
    assert live_count(configured) == chunks > 0


def test_if_empty_skips_a_filled_index(configured: Path, private_index: str) -> None:
    out, _ = run("--if-empty")
    assert "Indexed 5 documents" in out
    count = live_count(configured)
    out, _ = run("--if-empty")
    assert f"already holds {count} chunks; nothing to do" in out
    out, _ = run()  # without the flag it rebuilds and replaces
    assert f"replaced {private_index}__" in out


def test_paths_and_skipped_files(configured: Path) -> None:
    corpus = configured / "corpus"
    (corpus / "broken.md").write_text("---\ntitle: Broken\nlanguage: en\n", encoding="utf-8")
    out, err = run(str(corpus / "zh-password-reset.md"), str(corpus / "broken.md"))
    assert "Indexed 1 documents" in out
    assert "1 file(s) skipped" in out
    assert "broken.md: front matter is not closed" in err


FORM_DOC = """---
title: Hours correction form
language: en
kind: form
form_id: F-1
form_file: forms/hours.pdf
---

Download the hours correction form.
"""


def test_a_forms_attachment_is_one_quiet_line_not_a_skipped_file(configured: Path) -> None:
    corpus = configured / "corpus"
    (corpus / "forms").mkdir(exist_ok=True)
    (corpus / "forms" / "hours.pdf").write_bytes(b"%PDF-1.4 not really")
    (corpus / "en-form-hours.md").write_text(FORM_DOC, encoding="utf-8")
    out, err = run()
    assert err == ""
    assert "1 form attachment(s) kept for download (not indexed, by design)." in out
    assert "0 skipped" in out and "file(s) skipped" not in out


def test_no_documents_is_an_error(configured: Path) -> None:
    empty = configured / "empty"
    empty.mkdir()
    with pytest.raises(CommandError, match="no documents to index"):
        run(str(empty))


def test_reindex_runs_while_a_worker_serves_and_the_worker_follows(configured: Path) -> None:
    # a worker has the store open and answers from its replica; a reindex from this command needs no lock
    with open_store_from_settings() as worker:
        out, _ = run()
        assert "Indexed 5 documents" in out
        assert worker.sync() is True  # the worker's next check loads the new build
        assert (replica := worker.replica()) is not None and replica[0] == worker.live_collection()
