"""Which embedder and search mode the settings give, and the optional sentence-transformers embedder's refusals
(these run without the package; one test runs a real local model when there is one)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rag.llm import OpenAIEmbedder
from rag.retrieval.embedding import LexicalEmbedder, embedder_kind, index_batch_size
from rag.retrieval.st_embedder import SentenceTransformerEmbedder, SentenceTransformersUnavailable
from rag.retrieval.store import SearchSettings
from rag.wiring import build_deps, build_embedder, search_settings_from_settings

HAS_PACKAGE = importlib.util.find_spec("sentence_transformers") is not None
TEST_MODEL = os.environ.get("SENTENCE_TRANSFORMERS_TEST_MODEL", "")


@pytest.fixture
def offline(settings: Any) -> Any:
    settings.EMBEDDING_BASE_URL = ""
    settings.SENTENCE_TRANSFORMERS_MODEL = ""
    settings.RAG_SEARCH_MODE = ""
    return settings


def model_folder(root: Path) -> Path:
    """A folder shaped like a sentence-transformers model (its files, no weights)."""
    root.mkdir(parents=True)
    (root / "modules.json").write_text("[]", encoding="utf-8")
    (root / "config.json").write_text("{}", encoding="utf-8")
    return root


def test_nothing_configured_is_the_lexical_embedder_with_bm25_only(offline: Any) -> None:
    embedder = build_embedder()
    assert isinstance(embedder, LexicalEmbedder) and embedder_kind(embedder) == "lexical"
    mode, knobs = search_settings_from_settings(embedder)
    assert mode == "sparse" and knobs == SearchSettings()
    assert index_batch_size(embedder) == 128


def test_an_embeddings_server_gives_the_openai_embedder_and_fusion(offline: Any) -> None:
    offline.EMBEDDING_BASE_URL = "http://127.0.0.1:9/v1"
    offline.EMBEDDING_MODEL = "BAAI/bge-m3"
    offline.EMBEDDING_DIM = 1024
    offline.EMBEDDING_BATCH_SIZE = 16
    embedder = build_embedder()
    assert isinstance(embedder, OpenAIEmbedder) and embedder_kind(embedder) == "openai"
    assert embedder.name == "openai-BAAI/bge-m3-d1024" and embedder.dim == 1024
    assert embedder.endpoint == "http://127.0.0.1:9/v1/embeddings"
    assert index_batch_size(embedder) == 16
    assert search_settings_from_settings(embedder)[0] == "hybrid_weighted"
    offline.EMBEDDING_DIM = 768  # another dimension is another space
    assert build_embedder().name == "openai-BAAI/bge-m3-d768"


def test_mode_and_knobs_from_settings_win(offline: Any) -> None:
    offline.RAG_SEARCH_MODE = "hybrid_rescore"
    offline.RAG_SEARCH_CANDIDATES = 80
    offline.RAG_SEARCH_RRF_K = 20
    offline.RAG_SEARCH_RESCORE_WEIGHT = 0.4
    mode, knobs = search_settings_from_settings(LexicalEmbedder())
    assert mode == "hybrid_rescore"
    assert knobs == SearchSettings(candidates=80, rrf_k=20, rescore_weight=0.4)


@pytest.mark.parametrize("name", ["BAAI/bge-m3", "sentence-transformers/all-MiniLM-L6-v2", "bge-m3"])
def test_a_hub_name_is_refused(offline: Any, name: str) -> None:
    offline.SENTENCE_TRANSFORMERS_MODEL = name
    with pytest.raises(ImproperlyConfigured, match=r"looks like a model hub name.*nothing is downloaded"):
        build_embedder()


def test_a_missing_or_empty_folder_is_refused(offline: Any, tmp_path: Path) -> None:
    offline.SENTENCE_TRANSFORMERS_MODEL = str(tmp_path / "missing")
    with pytest.raises(ImproperlyConfigured, match=f"no such folder {tmp_path / 'missing'}"):
        build_embedder()
    (tmp_path / "empty").mkdir()
    offline.SENTENCE_TRANSFORMERS_MODEL = str(tmp_path / "empty")
    with pytest.raises(ImproperlyConfigured, match="holds no model"):
        build_embedder()


def test_both_kinds_at_once_are_refused(offline: Any, tmp_path: Path) -> None:
    offline.SENTENCE_TRANSFORMERS_MODEL = str(model_folder(tmp_path / "model"))
    offline.EMBEDDING_BASE_URL = "http://127.0.0.1:9/v1"
    with pytest.raises(ImproperlyConfigured, match="EMBEDDING_BASE_URL or SENTENCE_TRANSFORMERS_MODEL, not both"):
        build_embedder()


@pytest.mark.skipif(HAS_PACKAGE, reason="sentence-transformers is installed: the missing-package message cannot show")
def test_without_the_package_the_message_says_how_to_install_it(offline: Any, tmp_path: Path) -> None:
    offline.SENTENCE_TRANSFORMERS_MODEL = str(model_folder(tmp_path / "model"))
    with pytest.raises(ImproperlyConfigured, match=r"package is missing: install the extra .*requirements-st\.txt"):
        build_embedder()


@pytest.mark.skipif(HAS_PACKAGE, reason="sentence-transformers is installed: the missing-package message cannot show")
@pytest.mark.django_db
def test_start_up_refuses_before_the_store_is_opened(offline: Any, tmp_path: Path, private_index: str) -> None:
    offline.SENTENCE_TRANSFORMERS_MODEL = str(model_folder(tmp_path / "model"))
    offline.LLM_BASE_URL = ""
    with CaptureQueriesContext(connection) as queries, pytest.raises(ImproperlyConfigured, match="package is missing"):
        build_deps()
    assert not [q for q in queries.captured_queries if "rag_index" in q["sql"]]  # the store was never read


@pytest.mark.skipif(
    not (HAS_PACKAGE and TEST_MODEL),
    reason="needs `pip install -r requirements-st.txt` and SENTENCE_TRANSFORMERS_TEST_MODEL=/path/to/a/local/model",
)
def test_a_local_model_embeds_and_ranks(offline: Any) -> None:
    offline.SENTENCE_TRANSFORMERS_MODEL = TEST_MODEL
    embedder = build_embedder()
    assert isinstance(embedder, SentenceTransformerEmbedder) and embedder_kind(embedder) == "sentence-transformers"
    assert embedder.name == f"st-{Path(TEST_MODEL).name}-d{embedder.dim}".replace(" ", "_")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    query, near, far = embedder.embed_documents(
        ["How do I reset my password?", "Resetting a forgotten password", "Classroom course places are limited"]
    )
    assert len(query) == embedder.dim and embedder.embed_query("How do I reset my password?") == pytest.approx(query)

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(query, near) > cosine(query, far)
    assert search_settings_from_settings(embedder)[0] == "hybrid_weighted"


def test_the_refusals_are_typed(tmp_path: Path) -> None:
    with pytest.raises(SentenceTransformersUnavailable, match="no such folder"):
        SentenceTransformerEmbedder(str(tmp_path / "missing"))
