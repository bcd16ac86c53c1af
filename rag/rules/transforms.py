"""Offline transforms of the previous answer: summarise, shorten, and convert between Chinese scripts.

The previous answer arrives as text (history keeps no structure), so its "Sources" block is parsed back into
`Source`s: a shortened answer keeps the citations it still contains and the sources they point to.
Translation between English and Chinese needs a model; offline we say so rather than pretend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rag.rules import followup, messages
from rag.rules.answers import sources_block
from rag.rules.terms import split_sentences
from rag.state import Source
from rag.text.language import EN, ZH_HANS, ZH_HANT, detect_language, to_simplified_async, to_traditional_async

_SOURCE_LINE_RE = re.compile(r"^\[(\d+)\]\s+(.*?)(?:\s+\((\S+)\))?\s*$")
_CITED_RE = re.compile(r"\[(\d+)\]")


@dataclass(slots=True)
class Transformed:
    text: str
    sources: list[Source] = field(default_factory=list)


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


def first_sentences(body: str, max_chars: int) -> str:
    """Whole sentences from the start up to `max_chars` (always at least one)."""
    sentences = split_sentences(body, min_chars=1)
    if not sentences:
        return body[:max_chars]
    separator = "" if detect_language(body, default=ZH_HANT) in (ZH_HANT, ZH_HANS) else " "
    kept = [sentences[0]]
    length = len(sentences[0])
    for sentence in sentences[1:]:
        length += len(sentence) + len(separator)
        if length > max_chars:
            break
        kept.append(sentence)
    return separator.join(kept)


def _with_sources(body: str, sources: list[Source], language: str) -> Transformed:
    cited = {int(ref) for ref in _CITED_RE.findall(body)}
    kept = [s for s in sources if s.ref in cited]
    return Transformed(f"{body}\n\n{sources_block(kept, language)}" if kept else body, kept)


async def transform_previous_answer(
    previous_answer: str, instruction: str, *, language: str, summary_chars: int, shorten_chars: int
) -> Transformed:
    """Carry out `instruction` on the previous answer; `language` is the question's (for our own words)."""
    if not previous_answer.strip():
        return Transformed(messages.text("no_previous", language))
    body, sources = split_answer(previous_answer)
    answer_language = detect_language(body, default=ZH_HANT)
    if instruction in (followup.SUMMARIZE, followup.SHORTEN):
        limit = summary_chars if instruction == followup.SUMMARIZE else min(shorten_chars, max(len(body) // 2, 1))
        return _with_sources(first_sentences(body, limit), sources, answer_language)
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
