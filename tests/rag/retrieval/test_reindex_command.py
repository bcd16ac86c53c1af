from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from rag.retrieval.store import VectorStore
from tests.rag.retrieval.conftest import write_corpus

# Every run records an index job row.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def configured(settings: object, tmp_path: Path) -> Path:
    corpus = write_corpus(tmp_path / "corpus")
    settings.QDRANT_PATH = tmp_path / "qdrant"  # type: ignore[attr-defined]
    settings.QDRANT_URL = ""  # type: ignore[attr-defined]
    settings.CORPUS_DIR = corpus  # type: ignore[attr-defined]
    settings.QDRANT_COLLECTION = "helpcentre"  # type: ignore[attr-defined]
    settings.EMBEDDING_BASE_URL = ""  # type: ignore[attr-defined]
    return tmp_path


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("reindex", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def live_count(tmp_path: Path) -> int:
    with VectorStore.open("helpcentre", path=tmp_path / "qdrant") as store:
        return store.count()


def test_indexes_corpus_dir_and_reports(configured: Path) -> None:
    out, err = run()
    assert "Indexed 5 documents into" in out
    assert "live as helpcentre" in out
    assert err == ""
    chunks = int(out.split(" documents into ")[1].split(" chunks")[0])
    assert live_count(configured) == chunks > 0


def test_if_empty_skips_a_filled_index(configured: Path) -> None:
    out, _ = run("--if-empty")
    assert "Indexed 5 documents" in out
    count = live_count(configured)
    out, _ = run("--if-empty")
    assert f"already holds {count} chunks; nothing to do" in out
    out, _ = run()  # without the flag it rebuilds and replaces
    assert "replaced helpcentre__" in out


def test_paths_and_skipped_files(configured: Path) -> None:
    corpus = configured / "corpus"
    (corpus / "broken.md").write_text("---\ntitle: Broken\nlanguage: en\n", encoding="utf-8")
    out, err = run(str(corpus / "zh-password-reset.md"), str(corpus / "broken.md"))
    assert "Indexed 1 documents" in out
    assert "1 file(s) skipped" in out
    assert "broken.md: front matter is not closed" in err


def test_no_documents_is_an_error(configured: Path) -> None:
    empty = configured / "empty"
    empty.mkdir()
    with pytest.raises(CommandError, match="no documents to index"):
        run(str(empty))


def test_locked_store_explains_what_to_do(configured: Path) -> None:
    with (
        VectorStore.open("helpcentre", path=configured / "qdrant"),
        pytest.raises(CommandError, match="held by another process, most likely the running server") as info,
    ):
        run()
    assert "stop the server" in str(info.value)
