"""Whether a passage's article or section is titled with the user's question, in other words.

Help articles are named, and their sections headed, with the questions they answer: "研習時數何時上傳", "如何重設
密碼？", "When are my learning hours reported?". A user asking "學習時數要多久才會上傳到公務人員終身學習入口網站？"
asks that title's question, but word for word the question shares more with an article that mentions the portal's
long name in every chunk ("公務人員終身學習時數…"), and BM25 counts every shared character and bigram of such a
name. Two questions ask the same thing when they ask for the same kind of answer (a time: 多久, 何時, when) about
mostly the same words, which is how an FAQ is matched; an article whose title asks the user's question is the
one that answers it, so retrieval puts it first and the answer is drawn from it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rag.retrieval.chunking import ChunkingConfig
from rag.rules.terms import query_terms, text_terms
from rag.state import RetrievedChunk
from rag.text.question_words import question_kind

_SEPARATOR = ChunkingConfig().heading_separator
# Of a title's own words (question words left out), the share the user's question must contain: most of them, so
# that one shared word ("下載") does not make "何時可以下載？" the question "課程什麼時候可以下載離線觀看".
MIN_SHARED = 0.5
# Titles and headings read (`_read`): a corpus has a few thousand, and the same ones come back answer after answer.
_TITLES_KEPT = 8192


@dataclass(frozen=True, slots=True)
class TitlesAsking:
    """A question read once (`titles_asking`), to be put to many chunks: called with a chunk, whether its article
    title, or one of its section headings read in the title's context, asks what the question asks: the same kind
    of question (a time, a quantity, a manner...), with at least half of the title's words in the question."""

    kind: str  # `question_kind` of the question; "" when it asks nothing, and then no title asks it
    terms: frozenset[str]  # `text_terms` of the question (empty when it asks nothing)

    def __call__(self, chunk: RetrievedChunk) -> bool:
        if not self.kind:
            return False
        title_terms = _read(chunk.title)[1]
        for part in _titles(chunk):
            kind, terms = _read(part)
            if kind != self.kind:
                continue
            wanted = title_terms | terms
            if wanted and len(wanted & self.terms) / len(wanted) >= MIN_SHARED:
                return True
        return False


def titles_asking(question: str) -> TitlesAsking:
    """The question read for `TitlesAsking`: read it once per answer and put it to every chunk."""
    kind = question_kind(question)
    return TitlesAsking(kind, frozenset(text_terms(question)) if kind else frozenset())


@functools.lru_cache(maxsize=_TITLES_KEPT)
def _read(title: str) -> tuple[str, frozenset[str]]:
    """What a title or heading asks (`question_kind`) and its own words (`query_terms`), read once per text."""
    return question_kind(title), frozenset(query_terms(title))


def _titles(chunk: RetrievedChunk) -> list[str]:
    """The title, then each heading of the chunk's path below it."""
    parts = [part.strip() for part in chunk.heading.split(_SEPARATOR)] if chunk.heading else []
    return [chunk.title, *(part for part in parts if part and part != chunk.title)]
