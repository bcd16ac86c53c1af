from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest

from rag.deps import Retriever
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.retriever import DEFAULT_MODE, StoreRetriever
from rag.retrieval.store import SEARCH_MODES, VectorStore

QUESTIONS = [
    ("忘記密碼怎麼辦？", "zh-hant", "zh-password-reset"),
    ("重設連結有效多久", "zh-hant", "zh-password-reset"),
    ("實體課程報名截止是什麼時候", "zh-hant", "zh-enrolment"),
    ("How do I reset my password?", "en", "en-password-reset"),
    ("How many online courses can I take at once?", "en", "en-enrolment"),
    ("帳號資料變更申請表在哪裡下載", "zh-hant", "forms/zh-form-account-data-change"),
]


def test_default_mode_is_sparse() -> None:
    # chosen on DRCD dev with scripts/eval_drcd_quick.py: see the module docstring
    assert DEFAULT_MODE == "sparse"


def test_is_a_retriever(indexed_store: VectorStore, embedder: LexicalEmbedder) -> None:
    retriever: Retriever = StoreRetriever(indexed_store, embedder)  # checked structurally by type checkers
    assert inspect.iscoroutinefunction(retriever.search)
    assert list(inspect.signature(retriever.search).parameters) == ["query", "limit", "language", "kind"]


# the offline lexical embedding alone misses the "how many ... at once" paraphrase (BM25 and the hybrids find it)
CASES = [(m, *q) for m in SEARCH_MODES for q in QUESTIONS if not (m == "dense" and q[2] == "en-enrolment")]


@pytest.mark.parametrize(("mode", "question", "language", "doc_id"), CASES)
async def test_finds_the_right_document(
    indexed_store: VectorStore, embedder: LexicalEmbedder, mode: str, question: str, language: str, doc_id: str
) -> None:
    retriever = StoreRetriever(indexed_store, embedder, mode=mode)  # type: ignore[arg-type]
    results = await retriever.search(question, limit=3, language=language)
    assert results[0].doc_id == doc_id
    top = results[0]
    assert top.score > 0
    assert top.chunk_id.startswith(f"{doc_id}#")
    assert top.title and top.url and top.text and top.heading
    assert top.language == language


async def test_maps_form_fields_and_kind_filter(indexed_store: VectorStore, embedder: LexicalEmbedder) -> None:
    results = await StoreRetriever(indexed_store, embedder).search("帳號 電子郵件", limit=5, kind="form")
    assert [r.doc_id for r in results] == ["forms/zh-form-account-data-change"]
    form = results[0]
    assert (form.kind, form.form_id, form.form_file) == ("form", "F-103", "forms/account-data-change-request.pdf")
    assert form.tags == ("form", "account")


async def test_language_boosts_but_never_hides(indexed_store: VectorStore, embedder: LexicalEmbedder) -> None:
    retriever = StoreRetriever(indexed_store, embedder)
    # "30" (minutes) is in both password articles: a near-tie, decided by the asked language
    assert [r.language for r in await retriever.search("30", limit=2, language="zh-hant")] == ["zh-hant", "en"]
    assert [r.language for r in await retriever.search("30", limit=2, language="en")] == ["en", "zh-hant"]
    # a clearly better answer in the other language still comes first
    found = await retriever.search("30 password", limit=2, language="zh-hant")
    assert found[0].doc_id == "en-password-reset"
    # a hard filter would hide an answer that exists only in the other language
    assert [r.doc_id for r in await retriever.search("Enrol now", limit=3, language="zh-hant")] == ["en-enrolment"]
    filtering = StoreRetriever(indexed_store, embedder, language_policy="filter")
    assert await filtering.search("Enrol now", limit=3, language="zh-hant") == []


async def test_simplified_chinese_prefers_the_traditional_corpus(
    indexed_store: VectorStore, embedder: LexicalEmbedder
) -> None:
    results = await StoreRetriever(indexed_store, embedder).search("30", limit=1, language="zh-hans")
    assert results[0].language == "zh-hant"


async def test_limit_and_empty_queries(indexed_store: VectorStore, embedder: LexicalEmbedder) -> None:
    retriever = StoreRetriever(indexed_store, embedder)
    assert len(await retriever.search("密碼 課程 帳號", limit=2)) == 2
    assert await retriever.search("   ", limit=5) == []
    assert await retriever.search("密碼", limit=0) == []
    assert await retriever.search("the and of", limit=5) == []  # only stop words: nothing to match


async def test_search_runs_off_the_event_loop(indexed_store: VectorStore, embedder: LexicalEmbedder) -> None:
    threads: list[threading.Thread] = []
    original = indexed_store.search

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return original(*args, **kwargs)

    indexed_store.search = spy  # type: ignore[method-assign]
    await StoreRetriever(indexed_store, embedder).search("密碼", limit=1)
    assert threads and threads[0] is not threading.main_thread()


async def test_empty_store_returns_nothing(store: VectorStore, embedder: LexicalEmbedder) -> None:
    assert await StoreRetriever(store, embedder).search("密碼", limit=3) == []


def test_rejects_unknown_settings(store: VectorStore, embedder: LexicalEmbedder) -> None:
    with pytest.raises(ValueError):
        StoreRetriever(store, embedder, mode="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        StoreRetriever(store, embedder, language_policy="nope")  # type: ignore[arg-type]
