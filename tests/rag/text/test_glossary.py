"""The bilingual glossary and the sparse query expansion built on it."""

from __future__ import annotations

from rag.retrieval.sparse import BM25Encoder, QueryExpansion, query_encoder, token_id
from rag.text.glossary import Glossary, builtin_glossary, stem

SMALL = Glossary.parse(
    """
recording = 錄影|錄影檔
password = 密碼
log in = 登入
day = 天
not a line
"""
)


def test_stems_match_inflections_alike() -> None:
    assert stem("recordings") == stem("recording") == stem("recorded") == "record"
    assert stem("expires") == stem("expire") == stem("expired")
    assert stem("address") == "address"


def test_english_terms_give_their_chinese_and_the_reverse() -> None:
    assert SMALL.translations("How long are lecture recordings kept?") == ["錄影", "錄影檔"]
    assert SMALL.translations("Where do I log in?") == ["登入"]
    assert SMALL.translations("忘記密碼怎麼辦") == ["password"]
    assert SMALL.translations("How do I change the font?") == []


def test_a_one_character_term_expands_english_only() -> None:
    assert SMALL.translations("one day") == ["天"]
    assert SMALL.translations("今天可以登入嗎") == ["log in"]  # 天 alone is no key: it is inside 今天


def test_the_builtin_glossary_covers_common_help_desk_terms() -> None:
    glossary = builtin_glossary()
    assert len(glossary) > 300
    assert "證書" in glossary.translations("Where is my certificate?")
    assert "exam" in glossary.translations("考試可以用計算機嗎")


def test_expansion_adds_translations_below_the_questions_own_words() -> None:
    plain = BM25Encoder().encode_query("reset password")
    expanded = BM25Encoder(expansion=QueryExpansion(SMALL, weight=0.5)).encode_query("reset password")
    weights = dict(zip(expanded.indices, expanded.values, strict=True))
    assert {i: weights[i] for i in plain.indices} == dict.fromkeys(plain.indices, 1.0)
    assert weights[token_id("密碼")] == 0.5
    assert token_id("密") not in weights  # a Chinese translation's bigrams only, by default


def test_a_translation_of_several_tokens_weighs_one_word_in_all() -> None:
    glossary = Glossary.parse("email = 電子郵件")
    query = BM25Encoder(expansion=QueryExpansion(glossary, weight=0.9)).encode_query("email")
    weights = dict(zip(query.indices, query.values, strict=True))
    assert [round(weights[token_id(b)], 3) for b in ("電子", "子郵", "郵件")] == [0.3, 0.3, 0.3]


def test_the_product_encoder_expands_unless_the_weight_is_zero() -> None:
    assert query_encoder(0.0).expansion is None
    expansion = query_encoder(1.0).expansion
    assert expansion is not None and expansion.weight == 1.0
