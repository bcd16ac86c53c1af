"""Search queries for a question, and different ones on each retry ("smart retry", deterministic offline).

Pass 0 searches the question as asked (plus, for Chinese, the question without its scaffolding, and for a
follow-up, the question completed with the previous question's key phrases). Each retry changes strategy
rather than repeating a search that already failed: first the key terms alone, then a title-like phrase
("how to reset password", "如何重設密碼"), which is how help-centre articles are named.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag.rules.followup import ELABORATE, leans_on_context
from rag.rules.terms import content_phrases, strip_question_words
from rag.text.language import is_chinese

MAX_QUERIES = 3

STRATEGY_QUESTION = "question"
STRATEGY_KEY_TERMS = "key_terms"
STRATEGY_TITLE = "title_phrase"


@dataclass(frozen=True, slots=True)
class QueryPlan:
    strategy: str
    queries: list[str]


def build_queries(
    question: str,
    *,
    language: str,
    loops: int,
    previous_question: str = "",
    instruction: str = "",
    tried: list[str] | tuple[str, ...] = (),
) -> QueryPlan:
    # "Tell me more" has nothing to search for: the previous question says what "more" is about.
    base = previous_question if instruction == ELABORATE and previous_question else question
    context = previous_question if base is question and previous_question and leans_on_context(question) else ""
    phrases = content_phrases(base)
    context_phrases = [p for p in content_phrases(context) if p not in phrases] if context else []
    chinese = is_chinese(language)
    joiner = "" if chinese else " "

    if loops <= 0:
        strategy = STRATEGY_QUESTION
        candidates = [base]
        if context_phrases:
            candidates.append(" ".join([*context_phrases, *phrases]))
        if chinese:
            candidates.append(strip_question_words(base))
    elif loops == 1:
        strategy = STRATEGY_KEY_TERMS
        candidates = [" ".join([*context_phrases, *phrases]), " ".join(phrases)]
    else:
        strategy = STRATEGY_TITLE
        words = [*context_phrases, *phrases]
        title = ("如何" if chinese else "how to ") + joiner.join(words)
        candidates = [title, max(words, key=len) if words else ""]

    queries = _unique(candidates)
    fresh = [q for q in queries if q not in tried]
    # Repeating a failed search is only better than searching for nothing.
    return QueryPlan(strategy, (fresh or queries or [question])[:MAX_QUERIES])


def _unique(candidates: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for candidate in candidates:
        cleaned = " ".join(candidate.split())
        if cleaned and cleaned.strip() not in ("如何", "how to"):
            seen.setdefault(cleaned, None)
    return list(seen)
