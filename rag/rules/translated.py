"""How much of a question a passage in the other language says: its terms found as written (numbers, names) or
through the glossary translation of the question's terms ("recording" held as 錄影).

Measured the way `rag.rules.terms.best_coverage` measures a passage in the asker's language (the share of the
question's terms; a Chinese question's read as its bigrams and as its characters, whichever is found more), so
the two compare: a passage in the other language answers ahead of the asker's when it says more of the question
(docs/benchmarks/cross_language.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from rag.rules.terms import query_characters, query_terms, text_terms
from rag.text.glossary import Glossary


class TranslatedQuestion:
    """A question read once (its terms, its glossary terms and their translations), to measure passages by
    their terms (`rag.rules.terms.text_terms`)."""

    def __init__(self, question: str, glossary: Glossary) -> None:
        self.matches = glossary.matches(question)
        sources = [source for source, _ in self.matches]
        # per reading (bigrams, characters): the question's terms, and those each glossary term of it covers
        self._readings = [
            (wanted, [reading(source) & wanted for source in sources])
            for reading in (query_terms, query_characters)
            if (wanted := reading(question))
        ]
        # a translation without a comparable term (stop words only) says nothing
        self._translations = [[found for term in terms if (found := text_terms(term))] for _, terms in self.matches]

    def own(self, held: set[str]) -> float:
        """The share of the question's terms a passage holding `held` says as written (`best_coverage`'s)."""
        if not self._readings:
            return 1.0
        return max(len(wanted & held) / len(wanted) for wanted, _ in self._readings)

    def said(self, held: set[str]) -> float:
        """The share of the question's terms a passage holding `held` says, as written or translated (a
        glossary term counts as said when the passage holds one of its translations whole); 0.0 without terms."""
        translated = [any(terms <= held for terms in group) for group in self._translations]
        best = 0.0
        for wanted, covered in self._readings:
            said = wanted & held
            for found, part in zip(translated, covered, strict=True):
                if found:
                    said |= part
            best = max(best, len(said) / len(wanted))
        return best


def translated_coverage(question: str, passages: Iterable[str], glossary: Glossary) -> float:
    """The largest share of the question's terms one of `passages` says, as written or translated; 0.0 without
    passages or terms."""
    reading = TranslatedQuestion(question, glossary)
    return max((reading.said(text_terms(passage)) for passage in passages), default=0.0)
