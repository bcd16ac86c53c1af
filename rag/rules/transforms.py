"""Offline transforms of the previous answer: summarise, shorten, and convert between Chinese scripts.

The previous answer arrives as text (history keeps no structure), so its "Sources" block is parsed back into
`Source`s: a shortened answer keeps the citations it still contains and the sources they point to.
Translation between English and Chinese needs a model; offline we say so rather than pretend.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag.rules import followup, messages
from rag.rules.answers import AMOUNT_KINDS, AMOUNT_RE, sources_block
from rag.rules.terms import query_terms, split_sentences, text_terms
from rag.state import Source, Turn
from rag.text.language import EN, ZH_HANS, ZH_HANT, detect_language, to_simplified_async, to_traditional_async
from rag.text.question_words import question_kind

_SOURCE_LINE_RE = re.compile(r"^\[(\d+)\]\s+(.*?)(?:\s+\((\S+)\))?\s*$")
_CITED_RE = re.compile(r"\[(\d+)\]")


@dataclass(slots=True)
class Transformed:
    text: str
    sources: list[Source] = field(default_factory=list)


def previous_question(history: Sequence[Turn]) -> str:
    """The question the previous answer answered: the last user turn of the history."""
    return next((turn.content for turn in reversed(history) if turn.role == "user"), "")


def split_answer(answer: str) -> tuple[str, list[Source]]:
    """(body, sources) of an answer written as body + blank line + "Sources:" / "資料來源：" + "[n] title (url)"."""
    for label in messages.SOURCE_LABELS:
        cut = answer.rfind("\n\n" + label)
        if cut == -1:
            continue
        sources = []
        for line in answer[cut + 2 + len(label) :].splitlines():
            match = _SOURCE_LINE_RE.match(line.strip())
            if match:
                sources.append(Source(ref=int(match[1]), doc_id="", title=match[2], url=match[3] or ""))
        return answer[:cut].rstrip(), sources
    return answer.rstrip(), []


def first_sentences(body: str, max_chars: int, *, question: str = "") -> str:
    """Whole sentences up to `max_chars` (always at least one), in their order. Without a question, or when no
    sentence holds its terms, those from the start. With the question the answer answered, the sentences that
    answer it: a shortened "the link is valid for 30 minutes" keeps that sentence wherever it stood, and drops
    the steps around it that only share its topic."""
    sentences = split_sentences(body, min_chars=1)
    if not sentences:
        return body[:max_chars]
    separator = "" if detect_language(body, default=ZH_HANT) in (ZH_HANT, ZH_HANS) else " "
    scores = _answering_scores(sentences, question)
    best = max(scores, default=0.0)
    if best > 0:
        order = sorted(
            (i for i, score in enumerate(scores) if score >= _ANSWERING_SHARE * best), key=lambda i: -scores[i]
        )
    else:
        order = list(range(len(sentences)))
    kept = [order[0]]
    length = len(sentences[order[0]])
    for index in order[1:]:
        length += len(separator) + len(sentences[index])
        if length > max_chars:
            break
        kept.append(index)
    return separator.join(sentences[i] for i in sorted(kept))


# A sentence answers the question when it holds at least this share of the best sentence's weight.
_ANSWERING_SHARE = 0.75


def _answering_scores(sentences: list[str], question: str) -> list[float]:
    """Each sentence's weight of the question's terms, a term weighing 1 / the number of sentences holding it: the
    topic every sentence shares ("reset", "link") weighs little, what one sentence alone says ("valid") much."""
    wanted = query_terms(question) if question.strip() else set()
    if not wanted:
        return [0.0] * len(sentences)
    held = [wanted & text_terms(sentence) for sentence in sentences]
    spread = {term: sum(term in terms for terms in held) for term in wanted}
    scores = [sum(1 / spread[term] for term in terms) for terms in held]
    amounts = [bool(AMOUNT_RE.search(_CITED_RE.sub("", sentence))) for sentence in sentences]  # "[1]" is no amount
    if question_kind(question) in AMOUNT_KINDS and any(s and a for s, a in zip(scores, amounts, strict=True)):
        # "How long is the reset link valid?": a sentence without an amount shares the words but does not say it
        scores = [s if a else 0.0 for s, a in zip(scores, amounts, strict=True)]
    return scores


def _with_sources(body: str, sources: list[Source], language: str) -> Transformed:
    cited = {int(ref) for ref in _CITED_RE.findall(body)}
    kept = [s for s in sources if s.ref in cited]
    return Transformed(f"{body}\n\n{sources_block(kept, language)}" if kept else body, kept)


async def transform_previous_answer(
    previous_answer: str,
    instruction: str,
    *,
    language: str,
    summary_chars: int,
    shorten_chars: int,
    previous_question: str = "",
) -> Transformed:
    """Carry out `instruction` on the previous answer; `language` is the question's (for our own words);
    `previous_question`, what that answer answered, decides which sentences a shorter answer keeps."""
    if not previous_answer.strip():
        return Transformed(messages.text("no_previous", language))
    body, sources = split_answer(previous_answer)
    answer_language = detect_language(body, default=ZH_HANT)
    if instruction in (followup.SUMMARIZE, followup.SHORTEN):
        limit = summary_chars if instruction == followup.SUMMARIZE else min(shorten_chars, max(len(body) // 2, 1))
        return _with_sources(first_sentences(body, limit, question=previous_question), sources, answer_language)
    if instruction in (followup.TRANSLATE_ZH_HANS, followup.TRANSLATE_ZH_HANT) and answer_language != EN:
        convert = to_simplified_async if instruction == followup.TRANSLATE_ZH_HANS else to_traditional_async
        converted = await convert(previous_answer)
        return Transformed(
            converted,
            [Source(s.ref, s.doc_id, await convert(s.title), s.url, snippet=await convert(s.snippet)) for s in sources],
        )
    wants_english = instruction == followup.TRANSLATE_EN or (
        instruction == followup.TRANSLATE_OTHER and answer_language != EN
    )
    if instruction.startswith("translate") and (wants_english != (answer_language == EN)):
        # English <-> Chinese: say honestly that it cannot be done offline, and still give the answer.
        note = messages.text("cannot_translate", language)
        return Transformed(f"{note}\n\n{previous_answer.strip()}", sources)
    # Already in the wanted language, or an instruction with no offline transform: the answer as it was.
    return Transformed(previous_answer.strip(), sources)
