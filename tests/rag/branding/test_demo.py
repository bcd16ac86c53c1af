"""The demo organisation is data: loaded into an organisation's own corpus folder, removed without a trace."""

from __future__ import annotations

import re
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from rag.branding.memory import memory
from rag.branding.selectors import demo_loaded, organisation_get
from rag.documents.models import Document, DocumentStatus
from rag.retrieval.store import open_store_from_settings

pytestmark = pytest.mark.django_db(transaction=True)

# Anything that names the demo organisation or reaches it.
DEMO_WORDS = re.compile(r"LearnHub|學習e站|learnhub\.example|02-2000-0000|e-learning platform|citizen", re.I)


@pytest.fixture
def own_corpus(settings, tmp_path: Path, private_index: str) -> Iterator[Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "en-opening-hours.md").write_text(
        "---\ntitle: Opening hours\nlanguage: en\nurl: https://acme.example/hours\n---\n\n"
        "# Opening hours\n\nThe Acme library opens at nine every weekday and closes at five.\n",
        encoding="utf-8",
    )
    settings.CORPUS_DIR = corpus
    settings.EMBEDDING_BASE_URL = ""
    memory.drop()
    yield corpus
    memory.drop()


def _demo(*args: str) -> str:
    out = StringIO()
    call_command("demo", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_load_then_remove_leaves_only_the_organisations_own_documents(own_corpus: Path) -> None:
    own = {p.name for p in own_corpus.iterdir()}
    out = _demo("load")
    found = re.search(r"Demo loaded: (\d+) documents indexed\.", out)
    assert found, out
    loaded = int(found[1])
    assert demo_loaded()
    assert organisation_get().zh.name == "LearnHub 客服小幫手"
    assert (own_corpus / "forms" / "hours-correction-request.pdf").is_file()
    assert Document.objects.exclude(status=DocumentStatus.DELETED).count() == loaded > 60

    out = _demo("remove")
    assert f"Demo removed: {loaded} documents dropped from the index." in out
    assert not demo_loaded()
    assert {p.name for p in own_corpus.iterdir()} == own  # only what the demo copied is gone
    assert not DEMO_WORDS.search(repr(organisation_get()))
    assert Document.objects.exclude(status=DocumentStatus.DELETED).count() == 0
    with open_store_from_settings() as store:
        assert store.count() == 0  # the demo's chunks are out of the live index

    # Our own document is still indexable, and the demo does not come back on the next start.
    call_command("reindex", stdout=StringIO(), stderr=StringIO())
    assert list(Document.objects.exclude(status=DocumentStatus.DELETED).values_list("title", flat=True)) == [
        "Opening hours"
    ]
    assert "nothing to do (--if-new)" in _demo("load", "--if-new")


def test_remove_refuses_when_the_corpus_is_the_bundled_demo_folder(settings) -> None:
    settings.CORPUS_DIR = Path(settings.BASE_DIR) / "rag" / "corpus" / "demo"
    with pytest.raises(CommandError, match="CORPUS_DIR is the bundled demo folder"):
        _demo("remove")


def test_no_word_of_the_demo_organisation_in_code_or_default_prompts() -> None:
    root = Path(__file__).resolve().parents[3]
    places = [root / "static", root / "templates", root / "prompts", root / "rag" / "rules", root / "rag" / "nodes"]
    places += [root / "chatbot"]
    found = [
        str(path.relative_to(root))
        for place in places
        for path in place.rglob("*")
        if path.suffix in {".py", ".js", ".html", ".css"} and DEMO_WORDS.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []
