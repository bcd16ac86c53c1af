"""The other language's passages searched on their own, with a question's glossary translations.

Multilingual retrieval is commonly done per language and fused. The expanded BM25 query
(`rag.retrieval.sparse.QueryExpansion`) searches both languages at once, and there a Chinese question's own
characters and bigrams, matching many zh-hant pages, outweigh the few English words its glossary terms add: the
English page that alone answers it rarely comes up. So the retriever also asks the other language's passages
alone, with the translations of the question's glossary terms, and lets the best of them into its results at a
bounded place (`OtherLanguageSearch.admit`): when it says half of the question (as written or translated,
`rag.rules.translated`), ahead of the passages that say less of it, and among the first `within` distinct
articles whatever they say; a passage in the asker's language saying as much stays ahead of it. Measured in
docs/benchmarks/cross_language.md.
"""

from __future__ import annotations

import dataclasses
import re

from rag.retrieval.sparse import SparseVector, token_id
from rag.rules.terms import text_terms
from rag.rules.translated import TranslatedQuestion
from rag.state import RetrievedChunk
from rag.text.glossary import Glossary
from rag.text.tokenize import token_bag

# the corpus languages: a question's preferred one and the other
OTHER_LANGUAGE = {"en": "zh-hant", "zh-hant": "en"}
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclasses.dataclass(frozen=True, slots=True)
class OtherLanguageSearch:
    """`own`: the share of the question's terms a passage must say (in the asker's language as written, in the
    other as written or translated: `rag.rules.translated`) to answer it; `within`: the distinct article place
    the other language's passage takes at worst, when let in."""

    glossary: Glossary
    own: float = 0.5
    within: int = 3

    def read(self, question: str) -> TranslatedQuestion:
        return TranslatedQuestion(question, self.glossary)

    def query(self, reading: TranslatedQuestion) -> SparseVector:
        """The sparse query for the other language's passages: the translations of the question's glossary
        terms, each weighing one word split among its tokens; empty when the question holds no glossary term.
        (The question's language-neutral tokens, numbers and a Chinese question's Latin words, added at 1 each
        changed nothing measured: docs/benchmarks/cross_language.md.)"""
        if not reading.matches:
            return SparseVector([], [])
        weights: dict[int, float] = {}
        for _, terms in reading.matches:
            for term in terms:
                tokens = set(_tokens(term))
                for token in map(token_id, tokens):
                    weights[token] = max(weights.get(token, 0.0), 1.0 / len(tokens))
        items = sorted(weights.items())
        return SparseVector([i for i, _ in items], [w for _, w in items])

    def admit(
        self, reading: TranslatedQuestion, chunks: list[RetrievedChunk], found: RetrievedChunk, asked: str
    ) -> list[RetrievedChunk]:
        """`chunks` with `found` (the other language's best passage for the translations) ahead of the first
        passage that says less of the question than it does (in the asker's language as written, in the other as
        written or translated), and no further down than the `within`-th distinct article. Unchanged when it
        says less than `own` of the question, when its article is already there, or when a passage in the other
        language saying `own` of the question comes first (the expanded search found that side already: one
        more article would push the asker-language ones down). It takes the score of the passage it passes, so
        the list stays ordered by score."""
        terms = _Terms()
        said = reading.said(terms(found))
        if said < self.own:
            return chunks
        articles: list[str] = []
        slot = len(chunks)
        for i, chunk in enumerate(chunks):
            if chunk.doc_id == found.doc_id:
                return chunks
            if chunk.doc_id not in articles:
                articles.append(chunk.doc_id)
                if len(articles) == self.within:
                    slot = i  # the within-th article's place: it gets no further down
                    break
            if chunk.language == asked:
                if reading.own(terms(chunk)) < said:
                    slot = i
                    break
            elif reading.said(terms(chunk)) >= self.own:
                return chunks
            else:
                slot = i
                break
        if slot >= len(chunks) and chunks:
            return chunks
        score = chunks[slot].score if chunks else found.score
        rest = [chunk for chunk in chunks[slot:] if chunk.chunk_id != found.chunk_id]
        return [*chunks[:slot], dataclasses.replace(found, score=score), *rest][: max(len(chunks), 1)]


class _Terms:
    """Each chunk's comparable terms (its title, heading and text), read once."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}

    def __call__(self, chunk: RetrievedChunk) -> set[str]:
        found = self._seen.get(chunk.chunk_id)
        if found is None:
            found = self._seen[chunk.chunk_id] = text_terms(f"{chunk.title} {chunk.heading} {chunk.text}")
        return found


def _tokens(term: str) -> list[str]:
    # the index's tokens (rag.retrieval.sparse), without a Chinese term's single characters: 錄影 is asked as
    # 錄影, not as 錄 and 影, which many passages hold
    tokens = token_bag(term, bigrams=True, drop_stopwords=True, joins=True)
    return [t for t in tokens if len(t) > 1 or not _CJK_RE.match(t)] or tokens
