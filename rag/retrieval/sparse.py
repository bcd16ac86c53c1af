"""BM25 as sparse vectors, so Qdrant does the lexical search next to the dense one.

Document side: each token's weight is BM25's saturated term frequency ``tf*(k1+1)/(tf+k1*(1-b+b*dl/avgdl))``;
query side: weight 1 per distinct token, plus, with a `QueryExpansion`, the other-language translations of its
glossary terms, each weighing about one word (questions across languages, docs/benchmarks/cross_language.md).
The IDF factor is left to Qdrant (`Modifier.IDF`, which local mode implements too, with BM25's
``ln((N-df+0.5)/(df+0.5)+1)``), so it always matches the collection's live contents.
`avgdl` is a corpus statistic of the build and is stored in the collection's metadata by the indexer.

Token ids are crc32 of the token masked to 31 bits: stable across processes and small enough for any
sparse index. Collisions at 2^31 are rare and only merge two rare tokens' statistics.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rag.retrieval.term_counts import TOKEN_ID_MASK, TermBags, WordIds, term_bags
from rag.text.glossary import Glossary, builtin_glossary
from rag.text.question_words import without_question_words
from rag.text.tokenize import token_bag

TOKENIZER_NAME = "cjk-uni-bigram+latin-words+joins-v1"


_ids: dict[str, int] = {}


def token_id(token: str) -> int:
    # cached: indexing hashes the same few thousand CJK characters and bigrams hundreds of thousands of times
    found = _ids.get(token)
    if found is None:
        found = zlib.crc32(token.encode("utf-8")) & TOKEN_ID_MASK
        if len(_ids) > 1_000_000:
            _ids.clear()
        _ids[token] = found
    return found


_word_ids = WordIds(_ids, token_id)


def _default_tokens(text: str) -> list[str]:
    # English stop words carry no topic and in a small help corpus their IDF is not low enough to ignore
    # BM25 only counts them: the same tokens as tokenize's, in an order that is cheaper to make
    return token_bag(text, bigrams=True, drop_stopwords=True, joins=True)


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Sorted, unique indices with their weights (the order Qdrant's local mode wants)."""

    indices: list[int]
    values: list[float]

    def __len__(self) -> int:
        return len(self.indices)


def _sorted(weights: dict[int, float]) -> SparseVector:
    items = sorted(weights.items())
    return SparseVector([i for i, _ in items], [w for _, w in items])


def _bags_of(counts: Sequence[Counter[int]]) -> TermBags:
    ids, tallies, offsets = [], [], [0]
    for found in counts:
        for token in sorted(found):
            ids.append(token)
            tallies.append(found[token])
        offsets.append(len(ids))
    return TermBags(np.array(ids, dtype=np.int64), np.array(tallies, dtype=np.int64), np.array(offsets, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class QueryExpansion:
    """The other-language terms of a question's glossary terms, added to its sparse query at `weight` (the
    question's own tokens weigh 1): an English question then also matches a zh-hant-only page, and the reverse.
    `cjk_unigrams`: whether a Chinese term adds its single characters besides its bigrams."""

    glossary: Glossary
    weight: float = 0.5
    cjk_unigrams: bool = False
    # > 0: each translation weighs `weight` * max(1, source_mass * the tokens of the term it translates), so the
    # translation of 密碼 (密, 碼, 密碼: 3 tokens of the question) weighs what the term weighs in the question
    source_mass: float = 0.0
    # > 0: the retriever also searches with the question's own words, and their best passage in the asker's
    # language, when it holds this share of the question's terms, ranks ahead of the passages the translations
    # lifted above it (rag.retrieval.retriever): its other-language twin no longer outranks it
    own_coverage: float = 0.0


@dataclass(frozen=True, slots=True)
class BM25Params:
    k1: float = 1.2
    b: float = 0.75


class BM25Encoder:
    """Turns texts into BM25 sparse vectors; `avgdl` comes from the corpus being indexed."""

    def __init__(
        self,
        params: BM25Params | None = None,
        *,
        tokens: Callable[[str], list[str]] = _default_tokens,
        expansion: QueryExpansion | None = None,
    ) -> None:
        self.params = params or BM25Params()
        self._tokens = tokens
        # queries only: documents are indexed as written
        self.expansion = expansion

    def term_bags(
        self, texts: Sequence[str], *, normalized: Sequence[str] | None = None, batch: int = 2000
    ) -> TermBags:
        """Every text's term counts at once, as `term_counts` gives them one by one (vectorised for the default
        tokens, `batch` texts at a time to bound the arrays' memory). `normalized`: the texts through
        `rag.text.tokenize.normalize`, when the caller has them."""
        if self._tokens is not _default_tokens:
            return _bags_of([self.term_counts(text) for text in texts])
        given = normalized is not None
        source = normalized if normalized is not None else texts
        parts = [term_bags(source[i : i + batch], _word_ids, normalized=given) for i in range(0, len(source), batch)]
        return TermBags.concatenate(parts)

    def document_weights(self, bags: TermBags, avgdl: np.ndarray) -> np.ndarray:
        """BM25 weights of every (text, term) of `bags`, float64, with each text's avgdl: the numbers
        `document_vector` gives text by text (the same IEEE operations on whole arrays)."""
        k1, b = self.params.k1, self.params.b
        lengths = bags.lengths.astype(np.float64)
        safe = np.where(avgdl > 0, avgdl, 1.0)
        norms = np.where(avgdl > 0, k1 * (1.0 - b + b * lengths / safe), k1)
        tfs = bags.counts.astype(np.float64)
        return tfs * (k1 + 1.0) / (tfs + norms[bags.owners])

    def term_counts(self, text: str) -> Counter[int]:
        return _word_ids.counts(self._tokens(text))

    @staticmethod
    def average_lengths(bags: TermBags, groups: Sequence[str]) -> dict[str, float]:
        """`average_length` of the texts of each group (a language), `groups[i]` being text i's."""
        lengths = bags.lengths.tolist()
        totals: dict[str, list[int]] = {}
        for group, length in zip(groups, lengths, strict=True):
            totals.setdefault(group, []).append(length)
        return {group: sum(found) / len(found) for group, found in totals.items()}

    @staticmethod
    def average_length(counts: Sequence[Counter[int]]) -> float:
        if not counts:
            return 0.0
        return sum(c.total() for c in counts) / len(counts)

    def document_vector(self, counts: Counter[int], avgdl: float) -> SparseVector:
        k1, b = self.params.k1, self.params.b
        length = counts.total()
        norm = k1 * (1.0 - b + b * length / avgdl) if avgdl > 0 else k1
        # in float64 arrays: the same IEEE operations as one by one, at a fraction of the cost per chunk
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        tfs = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        order = np.argsort(ids)
        tfs = tfs[order]
        return SparseVector(ids[order].tolist(), (tfs * (k1 + 1.0) / (tfs + norm)).tolist())

    def encode_documents(self, texts: Sequence[str], *, avgdl: float | None = None) -> tuple[list[SparseVector], float]:
        """Vectors for `texts` and the avgdl used (computed over `texts` unless given)."""
        counts = [self.term_counts(t) for t in texts]
        used = self.average_length(counts) if avgdl is None else avgdl
        return [self.document_vector(c, used) for c in counts], used

    def encode_query(self, text: str, *, expand: bool = True) -> SparseVector:
        """Weight 1 per distinct token of the question without its Chinese question words (+0.6 point of
        recall@1 on DRCD dev: "哪一年" no longer matches every paragraph with 一年 in it); the whole question
        when nothing else is left. With the encoder's `expansion` (unless `expand` is false), the translations
        of its glossary terms too."""
        return self.query_vector(self.query_terms(text, expand=expand))

    @staticmethod
    def query_vector(terms: dict[str, float]) -> SparseVector:
        """The sparse vector of `query_terms`' terms (a token id's first term gives its weight)."""
        weights: dict[int, float] = {}
        for token, weight in terms.items():
            weights.setdefault(token_id(token), weight)
        return _sorted(weights)

    def query_terms(self, text: str, *, expand: bool = True) -> dict[str, float]:
        """The tokens of `encode_query`'s vector as strings, with their weights: the question's own first (1
        each), then the translations its own tokens do not already hold."""
        own = self._tokens(without_question_words(text)) or self._tokens(text)
        terms = dict.fromkeys(own, 1.0)
        if self.expansion is not None and expand:
            for token, weight in self._expansion_weights(text, self.expansion).items():
                terms.setdefault(token, weight)
        return terms

    def _expansion_weights(self, text: str, expansion: QueryExpansion) -> dict[str, float]:
        """The tokens of the glossary's translations of the question's terms, each translation weighing
        `expansion.weight` in all (split among its tokens: 電子郵件's three bigrams count as one word). A Chinese
        translation gives its bigrams, and its characters only with `cjk_unigrams` or when it is one long.
        (Sharing a term's weight among its translations as well kept more of the same-language recall@1 but
        lost most of the cross-language recall: docs/benchmarks/cross_language.md.)"""
        weights: dict[str, float] = {}
        for source, terms in expansion.glossary.matches(text):
            mass = max(1.0, expansion.source_mass * len(set(self._tokens(source)))) if expansion.source_mass else 1.0
            for term in terms:
                found = self._tokens(term)
                if not expansion.cjk_unigrams:
                    found = [t for t in found if len(t) > 1 or t.isascii()] or found
                distinct = set(found)
                for token in distinct:
                    weights[token] = max(weights.get(token, 0.0), expansion.weight * mass / len(distinct))
        return weights


# measured on the build half of the cross-language set: 0.5 lifts zh -> en without costing same-language recall,
# 0.7 and 1 lift it more but lose same-language recall@5 (docs/benchmarks/cross_language.md)
SOURCE_MASS = 0.5
# a passage in the asker's language answers in the question's own words when it holds half of its terms
# (rag.rules.terms.best_coverage)
OWN_COVERAGE = 0.5


def query_encoder(expansion_weight: float) -> BM25Encoder:
    """The retriever's query encoder: with the built-in bilingual glossary's expansion at `expansion_weight`
    (RAG_CROSS_LANGUAGE_WEIGHT; docs/benchmarks/cross_language.md), or without any when it is 0."""
    if expansion_weight <= 0:
        return BM25Encoder()
    expansion = QueryExpansion(
        builtin_glossary(), weight=expansion_weight, source_mass=SOURCE_MASS, own_coverage=OWN_COVERAGE
    )
    return BM25Encoder(expansion=expansion)
