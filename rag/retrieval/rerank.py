"""Second stage of the sparse search: BM25's first passages re-ranked by their best window of sentences.

BM25 scores a passage by its terms wherever they are. The answer to a reading-comprehension or help question
usually lies in one or two sentences that hold most of the question's terms together, while a sibling passage
(another paragraph of the same article, another section of the same help page) may hold as many of them
scattered over unrelated sentences. So each of the first `depth` passages also gets its *window coverage*: the
share of the question's term weight (each term's query weight times its IDF) found inside its best `window`
consecutive sentences (two: a sentence often names its subject only in the one before, "他", "it"), the terms of
the passage's title and headings counting in every window (a section's heading says what each of its sentences
is about: "實體課程" heads the list item "報名截止日為開課日前 7 天"). The passages are re-ordered by
``bm25 / best_bm25 + weight * coverage``; the score reported is that times the best BM25 score, so it stays in
BM25's units, never falls below the BM25 score, and passages of equal coverage keep BM25's order.

Terms are the query's tokens (`BM25Encoder.query_terms`, with the translations of a question's glossary terms at
their lower weight): CJK characters and bigrams are found in a sentence as substrings (exactly where the
tokenizer would find them), Latin words, numbers and joins only between word boundaries.
docs/benchmarks/retrieval.md has the measurements (DRCD dev: recall@1 0.9537 -> 0.9614, both halves).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rag.retrieval.chunking import split_sentences
from rag.retrieval.indexer import stored_context
from rag.retrieval.sparse import token_id
from rag.retrieval.store import StoreHit, VectorStore
from rag.text.tokenize import normalize

# a Latin letter or digit: a word token must not continue into one ("art" is not in "start")
_WORD_CHAR = "a-z0-9"


@dataclass(frozen=True, slots=True)
class SentenceRerank:
    """How the first passages are re-ranked: the `depth` first, by their best `window` consecutive sentences,
    coverage weighing `weight` against BM25 normalised by the best candidate's score (0 depth: no re-rank)."""

    depth: int = 10
    window: int = 2
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Term:
    """One query term and how it is found in normalised text: as a substring (a CJK character or bigram, where
    the tokenizer finds it wherever it stands), or by `pattern` (a Latin word, a number or a join, which must not
    run on into another letter or digit: "art" is not in "start")."""

    text: str
    weight: float
    pattern: re.Pattern[str] | None

    @classmethod
    def of(cls, text: str, weight: float) -> Term:
        starts_word = bool(re.match(f"[{_WORD_CHAR}]", text))
        ends_word = bool(re.search(f"[{_WORD_CHAR}]$", text))
        if not (starts_word or ends_word):
            return cls(text, weight, None)
        pattern = re.compile(
            (f"(?<![{_WORD_CHAR}])" if starts_word else "")
            + re.escape(text)
            + (f"(?![{_WORD_CHAR}])" if ends_word else "")
        )
        return cls(text, weight, pattern)

    def find(self, text: str, start: int) -> int:
        """Where the term next occurs in `text` from `start`, -1 when it does not."""
        if self.pattern is None:
            return text.find(self.text, start)
        match = self.pattern.search(text, start)
        return -1 if match is None else match.start()


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """A question's terms, each with its weight (query weight x IDF), ready to be looked for in sentences."""

    terms: tuple[Term, ...]
    total: float

    @classmethod
    def of(cls, weights: Mapping[str, float]) -> QueryTerms:
        kept = tuple(Term.of(term, weight) for term, weight in weights.items() if weight > 0)
        return cls(kept, sum(term.weight for term in kept))

    def coverage(self, text: str, window: int, context: str = "") -> float:
        """The share (0 to 1) of the terms' weight inside the best `window` consecutive sentences of `text`, the
        terms of `context` (the passage's title and headings, what each of its sentences is about) counting in
        every window."""
        if self.total <= 0:
            return 0.0
        split = split_sentences(text)  # before normalising: NFKC turns "？" into "?", which ends no sentence here
        if not split:
            return 0.0
        # one string, the sentences apart by a line break no term holds (normalised at once: a sentence holds no
        # line break, and NFKC keeps them); each term is looked for from the start of the sentence after the one
        # it was last found in, so at most once per sentence that holds it
        joined = normalize("\n".join(split))
        sentences = joined.split("\n")
        starts = list(itertools.accumulate((len(s) + 1 for s in sentences[:-1]), initial=0))
        held: list[set[int]] = [set() for _ in sentences]
        for i, term in enumerate(self.terms):
            found = term.find(joined, 0)
            while found >= 0:
                sentence = bisect.bisect_right(starts, found) - 1
                held[sentence].add(i)
                if sentence + 1 == len(starts):
                    break
                found = term.find(joined, starts[sentence + 1])
        heading = normalize(context)
        always = {i for i, term in enumerate(self.terms) if heading and term.find(heading, 0) >= 0}
        best = 0.0
        for first in range(max(1, len(held) - window + 1)):
            inside = always.union(*held[first : first + window])
            best = max(best, sum(self.terms[i].weight for i in inside))
        return best / self.total


def reranked_scores(
    scores: Sequence[float],
    texts: Sequence[str],
    contexts: Sequence[str],
    terms: QueryTerms,
    config: SentenceRerank,
) -> list[float]:
    """The new scores of passages with BM25 `scores`, `texts` and `contexts` (their title and headings; the
    first `config.depth` of a ranking): ``best * (score / best + weight * coverage)``, best being the highest of
    `scores`."""
    best = max(scores, default=0.0)
    if best <= 0:
        return list(scores)
    return [
        score + config.weight * best * terms.coverage(text, config.window, context)
        for score, text, context in zip(scores, texts, contexts, strict=True)
    ]


def rerank_hits(
    hits: Sequence[StoreHit], terms: Mapping[str, float], store: VectorStore, config: SentenceRerank
) -> list[StoreHit]:
    """`hits` (a sparse search's, best first) with the first `config.depth` re-ranked by their window coverage of
    `terms` (`BM25Encoder.query_terms`: token -> query weight), each term weighted by its IDF in `store` (by its
    query weight alone where the store cannot tell). The others follow as they were: no new score is lower than
    the old one, so the list stays ordered by score."""
    depth = min(len(hits), config.depth)
    if depth < 2 or not terms:
        return list(hits)
    idf = store.term_idf([token_id(term) for term in terms])
    weights = dict(terms) if idf is None else {term: w * f for (term, w), f in zip(terms.items(), idf, strict=True)}
    head = hits[:depth]
    scores = reranked_scores(
        [hit.score for hit in head],
        [str(hit.payload.get("text", "")) for hit in head],
        [stored_context(hit.payload) for hit in head],
        QueryTerms.of(weights),
        config,
    )
    order = sorted(range(depth), key=lambda i: -scores[i])  # stable: ties keep BM25's order
    return [StoreHit(head[i].point_id, scores[i], head[i].payload) for i in order] + list(hits[depth:])
