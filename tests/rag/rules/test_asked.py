"""An article titled with the user's question, in other words, answers it: retrieval puts it first and the answer
is drawn from it, although another article shares more of the question's words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.nodes.tool_executor import ToolExecutor, fuse
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import document_from_text
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.store import VectorStore
from rag.rules import answers
from rag.rules.asked import titles_asking
from rag.state import RetrievedChunk
from tests.rag.nodes.support import make_state, make_writer

# The parking office's two articles: one named after the centre and its permits, which says the centre's long
# name in every section and mentions renewal in passing; one titled with the question of when permits renew.
PERMITS = """---
title: 市民訓練中心停車證與停車費計算方式
url: https://help.example/zh/parking
language: zh-hant
---

# 市民訓練中心停車證與停車費計算方式

市民訓練中心的停車證由市民訓練中心總務組核發，可在市民訓練中心入口網站申請。

## 停車費如何計算？

市民訓練中心停車場依停放時間計費，每小時 30 元，當日最高 200 元。

## 身分很重要

只有已登記車號的市民訓練中心學員，停車證才會更新到市民訓練中心入口網站。
"""
RENEWAL = """---
title: 停車證何時更新
url: https://help.example/zh/permit-renewal
language: zh-hant
---

# 停車證何時更新

停車證到期前一個月，系統會寄出續辦通知。

## 更新時程

- 完成續辦後，停車證會在 5 個工作天內更新完成。
- 週末及國定假日不計入工作天。
"""
QUESTION = "停車證要多久才會更新到市民訓練中心入口網站？"


@pytest.fixture
def retriever(tmp_path: Path) -> Iterator[StoreRetriever]:
    store = VectorStore.open("parking", path=tmp_path / "qdrant")
    documents = [
        document_from_text(PERMITS, doc_id="zh-parking"),
        document_from_text(RENEWAL, doc_id="zh-permit-renewal"),
    ]
    build_index(documents, store, LexicalEmbedder(dim=256))
    yield StoreRetriever(store, LexicalEmbedder(dim=256))
    store.close()


def chunk(title: str, heading: str = "") -> RetrievedChunk:
    return RetrievedChunk(chunk_id="c#0", doc_id="c", title=title, url="", text="", score=1.0, heading=heading)


def test_a_title_asking_the_same_kind_of_question_about_most_of_its_words_asks_it() -> None:
    assert titles_asking(QUESTION)(chunk("停車證何時更新"))  # 多久 and 何時 both ask for a time
    assert titles_asking("How long until my parking permit is renewed?")(chunk("When is a parking permit renewed"))
    # a section heading is read with its article's title
    assert titles_asking("電子證書什麼時候可以下載？")(chunk("電子證書", "電子證書 > 何時可以下載？"))


def test_another_kind_of_question_or_other_words_do_not_ask_it() -> None:
    assert not titles_asking("停車證如何更新？")(chunk("停車證何時更新"))  # a manner, not a time
    assert not titles_asking(QUESTION)(chunk("市民訓練中心停車證與停車費計算方式"))  # asks nothing
    assert not titles_asking("App 課程什麼時候可以下載離線觀看？")(chunk("電子證書", "電子證書 > 何時可以下載？"))
    assert not titles_asking("重設密碼")(chunk("如何重設密碼"))  # the user's words ask nothing


async def test_the_article_titled_with_the_question_is_retrieved_first(retriever: StoreRetriever) -> None:
    queries = [QUESTION, "停車證要 才會更新到市民訓練中心入口網站"]  # the question, and without its question words
    ranked = [await retriever.search(query, limit=10, language="zh-hant") for query in queries]
    # word for word, the article naming the centre in every section wins
    assert fuse(ranked, top_k=5)[0].doc_id == "zh-parking"

    state = make_state(normalized_question=QUESTION, queries=queries, language="zh-hant")
    await ToolExecutor(retriever=retriever, top_k=3, timeout=5.0).run(state, make_writer()[0])
    assert state.retrieved[0].doc_id == "zh-permit-renewal"

    result = answers.extractive_answer(QUESTION, state.retrieved, language="zh-hant")
    assert result is not None
    assert "5 個工作天內更新完成" in answers.answer_body(result.text)
    assert [source.doc_id for source in result.sources] == ["zh-permit-renewal"]
