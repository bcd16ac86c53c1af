from __future__ import annotations

import zlib
from collections import Counter

import pytest

from rag.retrieval.sparse import BM25Encoder, BM25Params, query_encoder, token_id
from rag.text.question_words import without_question_words


def test_token_ids_are_stable_31_bit_crc32() -> None:
    assert token_id("密碼") == zlib.crc32("密碼".encode()) & 0x7FFFFFFF
    assert 0 <= token_id("password") < 2**31


def test_document_weights_follow_bm25_saturation() -> None:
    encoder = BM25Encoder(BM25Params(k1=1.2, b=0.75))
    counts = Counter({token_id("a"): 1, token_id("b"): 3})  # dl = 4
    vector = encoder.document_vector(counts, avgdl=8.0)
    norm = 1.2 * (1 - 0.75 + 0.75 * 4 / 8.0)
    expected = {token_id("a"): 1 * 2.2 / (1 + norm), token_id("b"): 3 * 2.2 / (3 + norm)}
    assert vector.indices == sorted(expected)
    assert vector.values == pytest.approx([expected[i] for i in vector.indices])


def test_longer_documents_weigh_a_term_less() -> None:
    encoder = BM25Encoder()
    short, long = encoder.encode_documents(["密碼", "密碼 " + "課程 " * 50])[0]
    tid = token_id("密")
    assert short.values[short.indices.index(tid)] > long.values[long.indices.index(tid)]


def test_avgdl_is_computed_over_the_corpus() -> None:
    encoder = BM25Encoder()
    vectors, avgdl = encoder.encode_documents(["重設密碼", "reset password now"])
    # 4 CJK unigrams + 3 bigrams = 7 tokens; "reset", "password", "now" = 3 tokens
    assert avgdl == pytest.approx(5.0)
    assert all(v.indices == sorted(v.indices) for v in vectors)


def test_query_has_weight_one_per_distinct_token_and_drops_english_stopwords() -> None:
    query = BM25Encoder().encode_query("How do I reset my password password?")
    assert sorted(query.indices) == sorted({token_id("reset"), token_id("password")})
    assert query.values == [1.0, 1.0]


def test_number_and_cjk_joins_are_tokens() -> None:
    query = BM25Encoder().encode_query("30分鐘")
    assert token_id("30分") in query.indices


def test_a_query_leaves_out_its_chinese_question_words() -> None:
    encoder = BM25Encoder()
    asked = encoder.encode_query("西部幹線在哪一年全線通車？")
    assert token_id("一年") not in asked.indices and token_id("哪一") not in asked.indices
    assert token_id("通車") in asked.indices
    # a question of nothing but question words still searches for something
    assert len(encoder.encode_query("為什麼？")) > 0


def _vector_by_ids(encoder: BM25Encoder, text: str) -> dict[int, float]:
    """encode_query as it was computed before the terms were kept as strings: own token ids weigh 1, each
    translation's ids share its weight, the largest kept, none replacing an own token's."""
    counts = encoder.term_counts(without_question_words(text)) or encoder.term_counts(text)
    weights = dict.fromkeys(counts, 1.0)
    expansion = encoder.expansion
    assert expansion is not None
    extra: dict[int, float] = {}
    for source, terms in expansion.glossary.matches(text):
        mass = max(1.0, expansion.source_mass * len(set(encoder._tokens(source))))
        for term in terms:
            found = [t for t in encoder._tokens(term) if len(t) > 1 or t.isascii()] or encoder._tokens(term)
            ids = Counter(token_id(t) for t in found)
            for token in ids:
                extra[token] = max(extra.get(token, 0.0), expansion.weight * mass / len(ids))
    for token, weight in extra.items():
        weights.setdefault(token, weight)
    return weights


@pytest.mark.parametrize(
    "question", ["如何重設密碼？", "How do I reset my password?", "忘記密碼怎麼辦", "課程報名 deadline", "請問"]
)
def test_query_terms_are_the_query_vectors_tokens(question: str) -> None:
    encoder = query_encoder(1.0)
    terms = encoder.query_terms(question)
    vector = encoder.encode_query(question)
    assert encoder.query_vector(terms) == vector
    assert dict(zip(vector.indices, vector.values, strict=True)) == _vector_by_ids(encoder, question)
    own = encoder.query_terms(question, expand=False)
    assert all(weight == 1.0 for weight in own.values())
    assert encoder.query_vector(own) == encoder.encode_query(question, expand=False)
