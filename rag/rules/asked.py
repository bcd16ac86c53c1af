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

from collections.abc import Callable

from rag.retrieval.chunking import ChunkingConfig
from rag.rules.terms import query_terms, text_terms
from rag.state import RetrievedChunk
from rag.text.question_words import question_kind

_SEPARATOR = ChunkingConfig().heading_separator
# Of a title's own words (question words left out), the share the user's question must contain: most of them, so
# that one shared word ("下載") does not make "何時可以下載？" the question "課程什麼時候可以下載離線觀看".
MIN_SHARED = 0.5


def asks_the_question(question: str, chunk: RetrievedChunk) -> bool:
    """Whether the chunk's article title, or one of its section headings read in the title's context, asks what
    `question` asks: the same kind of question (a time, a quantity, a manner...), with at least half of the
    title's words in the question."""
    return titles_asking(question)(chunk)


def titles_asking(question: str) -> Callable[[RetrievedChunk], bool]:
    """`asks_the_question` for one question and many chunks (the question is read once)."""
    kind = question_kind(question)
    asked = text_terms(question) if kind else set()

    def asks(chunk: RetrievedChunk) -> bool:
        if not kind:
            return False
        title_terms = query_terms(chunk.title)
        for part in _titles(chunk):
            if question_kind(part) != kind:
                continue
            wanted = title_terms | query_terms(part)
            if wanted and len(wanted & asked) / len(wanted) >= MIN_SHARED:
                return True
        return False

    return asks


def _titles(chunk: RetrievedChunk) -> list[str]:
    """The title, then each heading of the chunk's path below it."""
    parts = [part.strip() for part in chunk.heading.split(_SEPARATOR)] if chunk.heading else []
    return [chunk.title, *(part for part in parts if part and part != chunk.title)]
