"""The sparse search's second stage: BM25's first passages re-ranked by their best window of sentences."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import Document
from rag.retrieval.rerank import QueryTerms, SentenceRerank, rerank_hits
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.sparse import BM25Encoder, token_id
from rag.retrieval.store import SearchSettings, StoreHit, VectorStore
from tests.rag.stores import open_store

QUESTION = "圖書館週日下午幾點關門？"
# The question's words are all here, but one or two to a sentence, about other things; a short passage, so BM25
# ranks it first.
SCATTERED = Document(
    "library-events",
    "圖書館",
    "週日的講座在一樓舉行。講座免費，不必報名。電腦教室幾點開放請看公告。公告貼在入口。借書規定請洽門口櫃台。"
    "櫃台下午有人值班。關於館務的意見請寫在留言本。",
    "zh-hant",
)
# The answer, in one sentence of a longer passage.
ANSWER = Document(
    "library-hours",
    "圖書館",
    "本館位於校園北側，設有自修室、討論室、視聽室與電腦教室，提供期刊、論文、報紙與多媒體資料的查詢服務，"
    "並定期為新生舉辦導覽與資料庫講習，歡迎師生多加利用。館內禁止飲食，手機請調成靜音，離開座位時請帶走個人物品。"
    "週日下午五點關門，平日開放到晚上十點。",
    "zh-hant",
)
OTHERS = [
    Document("parking", "停車場", "停車場在體育館旁，汽車每小時收費三十元，機車免費。", "zh-hant"),
    Document("cafeteria", "餐廳", "學生餐廳供應早餐與午餐，假日不營業。", "zh-hant"),
    Document("wifi", "無線網路", "校園無線網路需要以學號登入，訪客請向服務台申請帳號。", "zh-hant"),
]


def _first(store: VectorStore, *, rerank_depth: int) -> list[str]:
    retriever = StoreRetriever(store, LexicalEmbedder(dim=256), settings=SearchSettings(rerank_depth=rerank_depth))
    return [chunk.doc_id for chunk in retriever.search_sync(QUESTION, limit=2, language="zh-hant")]


def test_the_passage_answering_in_one_sentence_goes_first(store: VectorStore) -> None:
    build_index([SCATTERED, ANSWER, *OTHERS], store, LexicalEmbedder(dim=256))
    # BM25 alone prefers the short passage that holds the words apart
    assert _first(store, rerank_depth=0) == ["library-events", "library-hours"]
    assert _first(store, rerank_depth=SearchSettings().rerank_depth) == ["library-hours", "library-events"]


def test_without_the_index_idf_each_term_weighs_its_query_weight(tmp_path: Path) -> None:
    # a Qdrant server computes its IDF itself: the re-rank then weighs every term alike, and still finds the answer
    with open_store("qdrant-local", tmp_path, engine="qdrant") as store:
        build_index([SCATTERED, ANSWER, *OTHERS], store, LexicalEmbedder(dim=256))
        assert store.term_idf([token_id("週日")]) is None
        assert _first(store, rerank_depth=0)[0] == "library-events"
        assert _first(store, rerank_depth=10)[0] == "library-hours"


def test_term_idf_is_bm25s(store: VectorStore) -> None:
    build_index([SCATTERED, ANSWER, *OTHERS], store, LexicalEmbedder(dim=256))
    idf = store.term_idf([token_id("週日"), token_id("停車"), token_id("不在任何文件")])
    assert idf is not None
    # 週日 in 2 of 5 passages, 停車 in 1, the last in none
    assert idf == pytest.approx([math.log((5 - 2 + 0.5) / (2 + 0.5) + 1), math.log((5 - 1 + 0.5) / 1.5 + 1), 0.0])


def test_coverage_is_the_best_window_of_consecutive_sentences() -> None:
    terms = QueryTerms.of({"甲": 1.0, "乙": 1.0, "丙": 2.0})
    text = "甲在這裡。乙在這裡。無關的句子。丙在這裡。"
    assert terms.coverage(text, 1) == pytest.approx(0.5)  # 丙 alone
    assert terms.coverage(text, 2) == pytest.approx(0.5)  # 甲 and 乙, or 丙
    assert terms.coverage("甲在這裡。乙和丙都在這裡。", 2) == pytest.approx(1.0)
    assert terms.coverage("", 2) == 0.0
    assert QueryTerms.of({}).coverage(text, 2) == 0.0


def test_the_heading_counts_in_every_window() -> None:
    terms = QueryTerms.of({"實體": 1.0, "截止": 1.0})
    text = "線上課程隨時可選。審核約需三天。名額有限。報名截止日為開課前七天。"
    assert terms.coverage(text, 2) == pytest.approx(0.5)
    assert terms.coverage(text, 2, "如何報名課程 > 實體課程") == pytest.approx(1.0)


def test_latin_terms_match_whole_words_only() -> None:
    terms = QueryTerms.of({"art": 1.0, "30分": 1.0})
    assert terms.coverage("Start at 130分.", 1) == 0.0
    assert terms.coverage("Modern Art opens at 9. It takes 30分鐘.", 2) == pytest.approx(1.0)
    # full-width letters and digits are the tokenizer's ASCII ones
    assert terms.coverage("ＡＲＴ ３０分鐘", 1) == pytest.approx(1.0)


def test_only_the_first_passages_move_and_no_score_falls(store: VectorStore) -> None:
    build_index([SCATTERED, ANSWER, *OTHERS], store, LexicalEmbedder(dim=256))
    payload = {"text": "學生餐廳供應早餐。", "title": ""}  # none of the question's terms
    hits = [
        StoreHit("a", 3.0, payload),
        StoreHit("b", 2.0, {"text": "週日下午五點關門。", "title": ""}),
        StoreHit("c", 1.0, {"text": "週日下午五點關門。", "title": ""}),  # below the depth: stays last
    ]
    terms = BM25Encoder().query_terms(QUESTION)
    out = rerank_hits(hits, terms, store, SentenceRerank(depth=2))
    assert [hit.point_id for hit in out] == ["b", "a", "c"]
    assert [hit.score for hit in out][1:] == [3.0, 1.0]
    assert out[0].score > 3.0
    assert rerank_hits(hits, terms, store, SentenceRerank(depth=0)) == hits
