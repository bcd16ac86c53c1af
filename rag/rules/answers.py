"""Offline answers composed from retrieved chunks: extractive with citations, form lists, CSV exports, and the
honest "not found" / "out of scope" replies. Pure functions; `response_synth` streams what they return.
"""

from __future__ import annotations

import dataclasses
import mimetypes
import re
from dataclasses import dataclass, field
from urllib.parse import quote

from rag.retrieval.chunking import ChunkingConfig
from rag.rules import messages
from rag.rules.asked import TitlesAsking, titles_asking
from rag.rules.passages import Block, Sentence, announces_list, answer_sentences
from rag.rules.procedures import Procedure, StepSection, find_procedure, step_sections, step_sections_doc
from rag.rules.terms import best_coverage, query_terms, split_sentences, text_terms
from rag.rules.translated import translated_coverage
from rag.state import Attachment, RetrievedChunk, Source
from rag.text.glossary import builtin_glossary
from rag.text.question_words import question_kind
from rag.text.sentences import ends_with_abbreviation
from rag.text.tables import Table, is_table_line, read_table

_TRAILING_PUNCT_RE = re.compile(r"[。！？!?.；;：:，,]+$")
_CITATION_RE = re.compile(r"\s?\[\d+\]")
# Words that say "a form" or "export" but not which one: dropped before matching forms to the question.
_FORM_GENERIC_RE = re.compile(
    r"申請表|申请表|表單|表单|表格|下載|下载|匯出|汇出|清單|清单|列表|所有|全部|檔案|档案|"
    r"\b(?:forms?|download|downloads|export|list|all|every|csv|file|files|spreadsheet|excel|application|pdf)\b",
    re.IGNORECASE,
)
_ALL_FORMS_RE = re.compile(r"所有|全部|\ball\b|\bevery\b|\bcomplete\b|\bfull\b", re.IGNORECASE)
_SUMMARY_CAP = 500
_RELATIVE_FLOOR = 0.4
_RANK_PENALTY = 0.2
_CROSS_REFERENCE_RE = re.compile(r"(?:see|refer to|請參考|请参考|詳見|详见|參見|参见|請見|请见)\b", re.IGNORECASE)
_SUMMARY_ANSWER_CHARS = 120
# A question about a row of a table is answered with the rows that fit it best, up to this many; more than that
# and it is about the table, which is given whole.
_MAX_ROWS = 3
# A yes/no question is answered only when a sentence, with its headings, says this share of its terms.
_YES_NO_COVERAGE = 0.6
_BARE_YES_NO_RE = re.compile(
    r"^(?:yes|no)\b|^(?:是的|是|對|对|可以|不可以|不行|不能|能|會|不會|有|沒有|没有)[，,。.！!；;]", re.IGNORECASE
)
# A sentence that adds none of the question's terms to the answer is given only when it scores this share of the
# best one's. On DRCD dev (offline, captured retrieval): no such sentence 0.874 containment at 95 characters
# (mean), 0.75 gives 0.887 at 111, 0.6 gives 0.892 at 126, any (before) 0.906 at 184; 0.75 keeps out the
# help-site padding ("Each course page has an Assignments tab." after the answer).
_NEAR_BEST = 0.75
# The best chunk's opening is added to an answer whose sentences say less than this share of the question's terms.
_PADDING_COVERAGE = 0.5
_HEADING_SEPARATOR = ChunkingConfig().heading_separator
# An amount: a figure (02:00, 3 個工作天, 20 hours), or a Chinese numeral with a measure word (三個月, 十二小時).
AMOUNT_RE = re.compile(
    r"[0-9\uff10-\uff19]|[零〇一二兩两三四五六七八九十百千萬万]+\s*(?:個|个|年|月|日|天|週|周|星期|小時|小时|分|秒|歲|岁|世紀|世纪)"
)
# What a question asking for a time or a quantity is answered with: a sentence without an amount does not say it.
# Applied only to an article titled with the question: on DRCD dev (encyclopaedia paragraphs, no such titles),
# preferring such sentences everywhere lost 0.3 point of containment ("何時" answered by "清朝末年").
AMOUNT_KINDS = ("time", "quantity")


@dataclass(slots=True)
class ComposedAnswer:
    text: str
    sources: list[Source] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)


def cite(sentence: str, ref: int, language: str) -> str:
    """The sentence with its citation before the closing punctuation: "...30 分鐘[1]。", "...30 minutes [1]."."""
    chinese = messages.reply_language(language) == messages.ZH
    if ends_with_abbreviation(sentence):  # "..., Edge, etc. [1]": the stop is the word's, not the sentence's
        return f"{sentence.rstrip()}[{ref}]" if chinese else f"{sentence.rstrip()} [{ref}]"
    match = _TRAILING_PUNCT_RE.search(sentence)
    body = sentence[: match.start()] if match else sentence
    punct = match.group() if match else ("。" if chinese else ".")
    return f"{body}[{ref}]{punct}" if chinese else f"{body} [{ref}]{punct}"


def sources_block(sources: list[Source], language: str) -> str:
    lines = [messages.text("sources", language)]
    lines.extend(f"[{s.ref}] {s.title} ({s.url})" if s.url else f"[{s.ref}] {s.title}" for s in sources)
    return "\n".join(lines)


class _SourceBook:
    """Numbers sources by document in order of first citation, so two chunks of one article share a number."""

    def __init__(self) -> None:
        self.sources: list[Source] = []
        self._refs: dict[str, int] = {}

    def ref(self, chunk: RetrievedChunk, *, download_url: str = "") -> int:
        key = chunk.doc_id or chunk.url or chunk.chunk_id
        ref = self._refs.get(key)
        if ref is None:
            ref = self._refs[key] = len(self.sources) + 1
            self.sources.append(Source.from_chunk(chunk, ref=ref, download_url=download_url))
        return ref


def _in_language(chunks: list[RetrievedChunk], language: str, question: str = "") -> list[RetrievedChunk]:
    """The chunks written in the reply language, when there are any and they hold the question's terms at least
    as well as the other language's hold its translations (else the other language's: better than nothing, and
    better than a passage that only shares a word or two)."""
    want = messages.reply_language(language)
    matching = [c for c in chunks if not c.language or messages.reply_language(c.language) == want]
    other = [c for c in chunks if c.language and messages.reply_language(c.language) != want]
    if not matching or (other and question and _other_language_answers(question, matching[:3], other[:3])):
        return other or chunks
    return matching


def _other_language_answers(question: str, own: list[RetrievedChunk], other: list[RetrievedChunk]) -> bool:
    """Whether the other language's passages say more of the question, as written or through the glossary
    translation of its terms (rag.rules.translated), than the asker's language's say as written: an incidental
    English page ("email", "code") does not answer what a zh-hant page says about 驗證碼 and 電子郵件, and a page
    in the asker's language saying as much keeps the answer. (The rule it replaces, the other language only
    when the asker's passages held under half of the question's terms, kept the asker's language whenever any of
    its pages shared half the question's words: docs/benchmarks/cross_language.md.)"""
    own_best = best_coverage(question, (_passage(chunk) for chunk in own))
    return translated_coverage(question, (_passage(chunk) for chunk in other), builtin_glossary()) > own_best


def _passage(chunk: RetrievedChunk) -> str:
    """What a chunk says, to compare with a question: its article's title, its heading and its text."""
    return f"{chunk.title} {chunk.heading} {chunk.text}"


def answer_articles(
    asking: TitlesAsking, chunks: list[RetrievedChunk], *, language: str, max_chunks: int, question: str = ""
) -> list[RetrievedChunk]:
    """The chunks an answer is drawn from, best first: articles (forms only when nothing else came back) in the
    reply language (or in the other, when only its passages hold the `question`'s terms, translated), and of them
    those whose article is titled with the question (`asking`), when there are any (an article titled with the
    question, in other words, answers it; others only share its words)."""
    articles = _in_language([c for c in chunks if c.kind != "form"] or chunks, language, question)[:max_chunks]
    return list(filter(asking, articles)) or articles


def steps_to_fetch(
    question: str,
    chunks: list[RetrievedChunk],
    *,
    language: str,
    max_chunks: int = 5,
    asking: TitlesAsking | None = None,
) -> str:
    """The doc_id of the article whose chunks the answer needs whole (a procedure written as step sections, of
    which the best passage is one), or "". `asking`: `titles_asking(question)`, when the caller has it."""
    asking = titles_asking(question) if asking is None else asking
    articles = answer_articles(asking, chunks, language=language, max_chunks=max_chunks, question=question)
    return step_sections_doc(question, articles)


def extractive_answer(
    question: str,
    chunks: list[RetrievedChunk],
    *,
    language: str,
    max_sentences: int = 5,
    min_sentences: int = 2,
    max_chunks: int = 5,
    document: list[RetrievedChunk] | None = None,
    asking: TitlesAsking | None = None,
) -> ComposedAnswer | None:
    """The sentences of the top chunks that share most terms with the question, in reading order, each cited;
    None when no chunk has a usable sentence. A procedural question whose best passage is a step of a procedure
    written as sections gets every step, from `document` (that article's chunks, see `steps_to_fetch`) or, without
    it, from the chunks retrieved. `asking`: `titles_asking(question)`, when the caller has it (read once for
    `steps_to_fetch` and this)."""
    asking = titles_asking(question) if asking is None else asking
    articles = answer_articles(asking, chunks, language=language, max_chunks=max_chunks, question=question)
    foreign = _all_in_other_language(articles, language)
    # a passage found only in the other language is quoted as written (its own punctuation and citation style),
    # after a line that says so
    composed = _extracted(
        # the passage's words are not the question's: its glossary terms in the passage's language find them
        with_translations(question) if foreign else question,
        chunks,
        articles,
        language=articles[0].language if foreign else language,
        max_sentences=max_sentences,
        min_sentences=min_sentences,
        document=document,
        asking=asking,
    )
    if composed is None or not foreign:
        return composed
    notice = messages.text("other_language", language)
    text = f"{notice}\n\n{answer_body(composed.text)}\n\n{sources_block(composed.sources, language)}"
    return dataclasses.replace(composed, text=text)


def with_translations(question: str) -> str:
    """The question followed by the other-language translations of its help-centre terms (rag.text.glossary)."""
    translations = builtin_glossary().translations(question)
    return f"{question} {' '.join(translations)}" if translations else question


def _all_in_other_language(chunks: list[RetrievedChunk], language: str) -> bool:
    want = messages.reply_language(language)
    return bool(chunks) and all(c.language and messages.reply_language(c.language) != want for c in chunks)


def _extracted(
    question: str,
    chunks: list[RetrievedChunk],
    articles: list[RetrievedChunk],
    *,
    language: str,
    max_sentences: int,
    min_sentences: int,
    document: list[RetrievedChunk] | None,
    asking: TitlesAsking,
) -> ComposedAnswer | None:
    """`extractive_answer` from the articles chosen, before any notice."""
    whole = _whole_procedure(question, chunks, articles, language=language, document=document)
    if whole is not None:
        return whole
    candidates = _scored_sentences(question, articles, asking)
    if candidates and candidates[0].line.row:
        return _rows_answer(candidates, articles, language)
    wanted = query_terms(question)
    if question_kind(question) == "yes_no":
        candidates = _yes_no_candidates(candidates, wanted)
        if not candidates:
            return None  # nothing says yes or no to it: the honest "not found", not the article's opening
    chosen, chunk_best = _chosen_sentences(
        candidates,
        articles,
        wanted=wanted,
        wants_amount=question_kind(question) in AMOUNT_KINDS,
        max_sentences=max_sentences,
        min_sentences=min_sentences,
    )
    if not chosen:
        return None
    return _composed(chosen, chunk_best, articles, language)


@dataclass(frozen=True, slots=True)
class _Candidate:
    score: float
    rank: int  # the chunk's index among the articles
    position: int  # the sentence's among the chunk's
    line: Sentence
    hits: frozenset[str]  # the question's terms the sentence says
    about: frozenset[str]  # the question's terms its article's title, its chunk's or its own section heading say


def _whole_procedure(
    question: str,
    chunks: list[RetrievedChunk],
    articles: list[RetrievedChunk],
    *,
    language: str,
    document: list[RetrievedChunk] | None,
) -> ComposedAnswer | None:
    """Every step of the procedure the question asks for, when the best passage belongs to one: written as step
    sections (from `document`, or the chunks retrieved) or as a list inside a passage; None otherwise."""
    steps_doc = step_sections_doc(question, articles)
    if steps_doc:
        sections = [c for c in document or () if c.doc_id == steps_doc] or [c for c in chunks if c.doc_id == steps_doc]
        steps = step_sections(sections)
        if len(steps) > 1:
            return steps_answer(steps, language)
    procedure = find_procedure(question, articles)
    return procedure_answer(procedure, language) if procedure is not None else None


def _scored_sentences(question: str, articles: list[RetrievedChunk], asking: TitlesAsking) -> list[_Candidate]:
    """Every sentence of the articles that shares a term with the question, scored, best first."""
    wanted = query_terms(question)
    candidates: list[_Candidate] = []
    for rank, chunk in enumerate(articles):
        # A chunk whose title or section names the question's words is about it; a passing mention is not. So is
        # a sentence under a heading inside the chunk (a merged section) that names them.
        about = wanted & text_terms(f"{chunk.title} {chunk.heading}")
        for position, line in enumerate(answer_sentences(chunk)):
            sentence = line.text
            line_about = about | (wanted & text_terms(line.section)) if line.section else about
            if line.table:  # a row's header says what its cells are, as a heading says what a sentence is about
                line_about = line_about | (wanted & text_terms(line.table[0]))
            if not line.items and announces_list(sentence):
                continue  # "check the following in order": what follows is not in the passage (other sections)
            hits = wanted & text_terms(sentence)
            if not hits:
                continue
            score = (len(hits) + len(line_about)) / (1 + _RANK_PENALTY * rank) + 0.05 / (1 + position)
            if _CROSS_REFERENCE_RE.match(sentence):
                score /= 2  # "See 'How do I reset my password'" points elsewhere instead of answering
            candidates.append(_Candidate(score, rank, position, line, frozenset(hits), frozenset(line_about)))
    if articles and asking.kind in AMOUNT_KINDS and asking(articles[0]):
        # "多久", "how many" asked by the article's own title: of its sentences, those that give an amount answer
        # it; the others only share the question's words
        candidates = [c for c in candidates if AMOUNT_RE.search(c.line.text)] or candidates
    candidates.sort(key=lambda c: (-c.score, c.rank, c.position))
    return candidates


def _asked_rows(candidates: list[_Candidate], chunks: list[RetrievedChunk]) -> tuple[Table, tuple[str, ...]]:
    """The table of the best sentence (a row) and the rows of it to give: those as good as the best row (as many
    of the question's words in their own cells); every row when more than a few are, since the question is then
    about the table rather than a row of it."""
    top = candidates[0]
    rows = [
        c.line.row
        for c in candidates
        if c.line.row and c.rank == top.rank and c.line.table == top.line.table and len(c.hits) == len(top.hits)
    ]
    table = next(
        (t for t in _tables(chunks[top.rank]) if t.header == top.line.table and top.line.row in t.rows),
        Table(top.line.table, tuple(dict.fromkeys(rows))),
    )
    return table, table.rows if len(rows) > _MAX_ROWS else tuple(row for row in table.rows if row in rows)


def _rows_answer(candidates: list[_Candidate], articles: list[RetrievedChunk], language: str) -> ComposedAnswer:
    """The question is about a row of a table (its best sentence is one): that row under the table's header,
    captioned with the table's section, cited."""
    top = candidates[0]
    table, shown = _asked_rows(candidates, articles)
    chunk = articles[top.rank]
    book = _SourceBook()
    ref = book.ref(chunk)
    caption = top.line.section or (chunk.heading.rsplit(_HEADING_SEPARATOR, 1)[-1].strip() or chunk.title)
    colon = "：" if messages.reply_language(language) == messages.ZH else ":"
    lead = cite(caption, ref, language).rstrip("。.") + colon
    body = f"{lead}\n\n{table.markdown(shown)}"
    return ComposedAnswer(f"{body}\n\n{sources_block(book.sources, language)}", book.sources)


def rows_in_focus(question: str, chunks: list[RetrievedChunk]) -> list[RetrievedChunk]:
    """The chunks for a model to answer from: when the question is about a row of a table (its best sentence in
    them is a row), that table cut to its header and the rows asked about, as the offline answer gives them, so
    the row is not lost in a long table or cut off with the passage's length."""
    candidates = _scored_sentences(question, chunks, titles_asking(question))
    if not candidates or not candidates[0].line.row:
        return chunks
    table, shown = _asked_rows(candidates, chunks)
    if shown == table.rows:
        return chunks
    rank = candidates[0].rank
    chunk = chunks[rank]
    lines = chunk.text.splitlines()
    start = end = next(i for i, line in enumerate(lines) if line.strip() == candidates[0].line.row)
    while start > 0 and is_table_line(lines[start - 1]):
        start -= 1
    while end < len(lines) and is_table_line(lines[end]):
        end += 1
    text = "\n".join([*lines[:start], table.markdown(shown), *lines[end:]])
    return [*chunks[:rank], dataclasses.replace(chunk, text=text), *chunks[rank + 1 :]]


def _tables(chunk: RetrievedChunk) -> list[Table]:
    """The pipe tables of the chunk's text."""
    found: list[Table] = []
    run: list[str] = []
    for line in [*chunk.text.splitlines(), ""]:
        if is_table_line(line):
            run.append(line)
        elif run:
            found.append(read_table(run))
            run = []
    return found


def _coverage(candidate: _Candidate, wanted: set[str]) -> float:
    """The share of the question's terms the sentence, its section and its article's title say together."""
    return len(candidate.hits | candidate.about) / len(wanted) if wanted else 0.0


def _yes_no_candidates(candidates: list[_Candidate], wanted: set[str]) -> list[_Candidate]:
    """For a yes/no question, the sentences that may answer it: only when one of them, with its headings, says
    most of what was asked ("export grades to Excel" is not answered by a sentence about resubmitting, whatever
    words they share); and a sentence that opens with a bare yes or no ("Yes, until the deadline.") only under a
    heading that asks the user's question, since its yes belongs to that heading's question."""
    if not candidates or max(_coverage(c, wanted) for c in candidates) < _YES_NO_COVERAGE:
        return []
    return [
        c
        for c in candidates
        if not _BARE_YES_NO_RE.match(c.line.text) or len(c.about) / len(wanted) >= _YES_NO_COVERAGE
    ]


def _chosen_sentences(
    candidates: list[_Candidate],
    articles: list[RetrievedChunk],
    *,
    wanted: set[str],
    wants_amount: bool,
    max_sentences: int,
    min_sentences: int,
) -> tuple[dict[tuple[int, int], Sentence], dict[int, float]]:
    """The sentences to give, by (chunk index, position), and each chunk's best score.

    After the best sentence, one is given only when it says something of the question the ones before did not
    (a term they lack), gives the amount a time or quantity question asks for when none has (`wants_amount`), or
    matches it nearly as well as the best one: a sentence sharing only words already answered pads the answer.
    The best chunk's opening is added only when the sentences found say less than half of what was asked."""
    # Sentences far below the best one only share a common word ("密碼") with the question: leave them out.
    floor = candidates[0].score * _RELATIVE_FLOOR if candidates else 0.0
    chosen: dict[tuple[int, int], Sentence] = {}
    chunk_best: dict[int, float] = {}
    seen_text: set[str] = set()
    covered: set[str] = set()
    has_amount = False
    for candidate in candidates:
        line = candidate.line
        if len(chosen) >= max_sentences or candidate.score < floor:
            break
        adds = bool(candidate.hits - covered) or candidate.score >= _NEAR_BEST * candidates[0].score
        # a time or a quantity asked and none given yet: a sentence giving one says what was asked
        adds = adds or (wants_amount and not has_amount and bool(AMOUNT_RE.search(line.text)))
        if line.text in seen_text or (chosen and not adds):
            continue
        has_amount = has_amount or bool(AMOUNT_RE.search(line.text))
        seen_text.add(line.text)
        seen_text.update(_item_sentences(line))  # a list given whole is not quoted again item by item
        chosen[(candidate.rank, candidate.position)] = line
        chunk_best.setdefault(candidate.rank, candidate.score)
        covered |= candidate.hits | candidate.about
    if len(chosen) < min_sentences and articles and len(covered) < _PADDING_COVERAGE * len(wanted):
        # Too little matched word for word: lead with the best chunk's opening, which usually states its point.
        lead = max(chunk_best, key=chunk_best.__getitem__) if chunk_best else 0
        for position, line in enumerate(answer_sentences(articles[lead])):
            if len(chosen) >= min_sentences:
                break
            if line.text not in seen_text and (line.items or not announces_list(line.text)):
                seen_text.add(line.text)
                seen_text.update(_item_sentences(line))
                chosen[(lead, position)] = line
                chunk_best.setdefault(lead, 0.0)
    return chosen, chunk_best


def _composed(
    chosen: dict[tuple[int, int], Sentence],
    chunk_best: dict[int, float],
    articles: list[RetrievedChunk],
    language: str,
) -> ComposedAnswer:
    """The chosen sentences in reading order, cited, with their sources."""
    # Reading order: the best chunk's sentences first, each chunk's sentences in their own order (steps stay
    # in sequence).
    order = sorted(chosen, key=lambda key: (-chunk_best[key[0]], key[0], key[1]))
    book = _SourceBook()
    separator = _separator(language)
    body = ""
    for key in order:
        line, ref = chosen[key], book.ref(articles[key[0]])
        if line.in_list and any(line.text in item for item in _shown_items(chosen)):
            continue
        if line.items:
            listed = _list_lines(line.items, ordered=line.ordered, ref=ref, language=language)
            body = f"{body.rstrip()}\n\n{line.text}\n{listed}\n\n".lstrip()
        else:
            body += ("" if not body or body.endswith("\n") else separator) + cite(line.text, ref, language)
    return ComposedAnswer(f"{body.strip()}\n\n{sources_block(book.sources, language)}", book.sources)


def _separator(language: str) -> str:
    return "" if messages.reply_language(language) == messages.ZH else " "


def _item_sentences(line: Sentence) -> set[str]:
    return {text for item in line.items for text in split_sentences(item)}


def _shown_items(chosen: dict[tuple[int, int], Sentence]) -> list[str]:
    return [item for line in chosen.values() for item in line.items]


def _list_lines(items: tuple[str, ...], *, ordered: bool, ref: int, language: str) -> str:
    """A list's items, whole and in order, numbered or bulleted; the citation after the last one."""
    separator = _separator(language)
    texts = [separator.join(split_sentences(item, min_chars=1)) for item in items]
    texts = [text for text in texts if text]
    if texts and _TRAILING_PUNCT_RE.search(texts[-1]):
        texts[-1] = cite(texts[-1], ref, language)
    elif texts:  # an item without closing punctuation ("Google Chrome") gets none added
        texts[-1] += f"[{ref}]" if messages.reply_language(language) == messages.ZH else f" [{ref}]"
    return "\n".join(f"{i}. {text}" if ordered else f"- {text}" for i, text in enumerate(texts, start=1))


def _block_text(block: Block, ref: int, language: str) -> str:
    if block.kind == "paragraph":
        text = _separator(language).join(split_sentences(block.texts[0], min_chars=1))
        # a lead-in to the list ("...以下任一種方式：") is cited with the list
        return text if text.endswith((":", "：")) else cite(text, ref, language)
    return _list_lines(block.texts, ordered=block.kind == "ordered", ref=ref, language=language)


def procedure_answer(procedure: Procedure, language: str) -> ComposedAnswer:
    """The lead-in, every step in order, what follows them and the sub-sections retrieved (rules, limits)."""
    book = _SourceBook()
    ref = book.ref(procedure.chunk)
    parts = [_block_text(block, ref, language) for block in procedure.lead]
    parts.append(_block_text(procedure.steps, ref, language))
    parts.extend(_block_text(block, ref, language) for block in procedure.after)
    colon = "：" if messages.reply_language(language) == messages.ZH else ":"
    for chunk, blocks in procedure.subsections:
        sub_ref = book.ref(chunk)
        label = chunk.heading.rsplit(">", 1)[-1].strip()
        texts = [_block_text(block, sub_ref, language) for block in blocks]
        if texts and label and blocks[0].kind != "paragraph":
            texts[0] = f"{label}{colon}\n{texts[0]}"
        parts.extend(texts)
    body = "\n\n".join(part for part in parts if part.strip())
    return ComposedAnswer(f"{body}\n\n{sources_block(book.sources, language)}", book.sources)


def with_heading(chunk: RetrievedChunk) -> RetrievedChunk:
    """The chunk with its own heading as the first line of its text, when the text does not say it already (a
    model reading the chunk's text alone would not know it is "第二步")."""
    heading = chunk.heading.rsplit(_HEADING_SEPARATOR, 1)[-1].strip() if chunk.heading else ""
    if not heading or heading in chunk.text:
        return chunk
    return dataclasses.replace(chunk, text=f"{heading}\n{chunk.text}")


def steps_answer(steps: tuple[StepSection, ...], language: str) -> ComposedAnswer:
    """Every step of a procedure written as sections, in order: its heading in bold, then what it says."""
    book = _SourceBook()
    parts: list[str] = []
    for step in steps:
        ref = book.ref(step.chunk)
        texts = [_block_text(block, ref, language) for block in step.blocks]
        parts.append("\n".join([f"**{step.label}**", *(text for text in texts if text.strip())]))
    body = "\n\n".join(parts)
    return ComposedAnswer(f"{body}\n\n{sources_block(book.sources, language)}", book.sources)


def _form_chunks(chunks: list[RetrievedChunk], language: str) -> list[RetrievedChunk]:
    """One chunk per form, in rank order, preferring the reply language's version of each form."""
    want = messages.reply_language(language)
    chosen: dict[str, RetrievedChunk] = {}
    for chunk in chunks:
        if chunk.kind != "form":
            continue
        key = chunk.form_id or chunk.doc_id or chunk.chunk_id
        kept = chosen.get(key)
        # A later version replaces the kept one in place (dict order stays the rank order of first sight).
        better = kept is not None and messages.reply_language(kept.language) != want
        if kept is None or (better and messages.reply_language(chunk.language) == want):
            chosen[key] = chunk
    return list(chosen.values())


def _subject_terms(question: str) -> set[str]:
    return query_terms(_FORM_GENERIC_RE.sub(" ", question))


def _forms_named(question: str, forms: list[RetrievedChunk]) -> list[RetrievedChunk]:
    """The forms that fit what the question names, best first; empty when it names nothing in particular or
    nothing fits."""
    subject = _subject_terms(question)
    if not subject:
        return []
    scored = [(len(subject & text_terms(f"{f.title} {f.form_id} {f.text}")), i, f) for i, f in enumerate(forms)]
    best = max((s for s, _, _ in scored), default=0)
    if best == 0:
        return []
    # Keep the forms nearly as good as the best one: "時數補登申請表" should not list every 申請表.
    return [f for s, _, f in sorted(scored, key=lambda t: (-t[0], t[1])) if s >= 0.6 * best]


def form_download_url(chunk: RetrievedChunk, forms_base_url: str) -> str:
    """Where the form's file is served: the forms base URL + the file's name.

    Only the name: `form_file` is the file's path inside the corpus ("forms/f.pdf"), and the base URL already
    points at that folder, so joining the whole path would give "/forms/forms/f.pdf".
    """
    if not chunk.form_file:
        return chunk.url
    return forms_base_url.rstrip("/") + "/" + quote(chunk.form_file.rsplit("/", 1)[-1])


def forms_answer(
    question: str, chunks: list[RetrievedChunk], *, language: str, forms_base_url: str, contact: str, limit: int = 5
) -> ComposedAnswer:
    all_forms = _form_chunks(chunks, language)
    forms = (_forms_named(question, all_forms) or all_forms)[:limit]
    if not forms:
        return ComposedAnswer(messages.text("no_forms", language, contact=contact))
    chinese = messages.reply_language(language) == messages.ZH
    book = _SourceBook()
    lines = [messages.text("forms_intro", language), ""]
    attachments = []
    for i, form in enumerate(forms, start=1):
        url = form_download_url(form, forms_base_url)
        ref = book.ref(form, download_url=url)
        label = f"{form.title}（{form.form_id}）" if chinese and form.form_id else form.title
        if not chinese and form.form_id:
            label = f"{form.title} ({form.form_id})"
        colon = "：" if chinese else ": "
        lines.append(f"{i}. {label}{colon}[{messages.text('download', language)}]({url}) [{ref}]")
        if form.form_file:
            media_type = mimetypes.guess_type(form.form_file)[0] or "application/octet-stream"
            attachments.append(Attachment(name=form.form_file.rsplit("/", 1)[-1], url=url, media_type=media_type))
    text = "\n".join(lines) + "\n\n" + sources_block(book.sources, language)
    return ComposedAnswer(text, book.sources, attachments)


def export_answer(question: str, chunks: list[RetrievedChunk], *, language: str, export_url: str) -> ComposedAnswer:
    """A link to the CSV export: of the forms the question names, or of all forms when it names none."""
    forms = [f for f in _form_chunks(chunks, language) if f.form_id]
    matched = [] if _ALL_FORMS_RE.search(question) else _forms_named(question, forms)
    if matched:
        ids = ",".join(quote(f.form_id, safe="-_.") for f in matched)
        url = f"{export_url}?ids={ids}"
        text = messages.text("export_some", language, count=len(matched), url=url)
    else:
        url = export_url
        text = messages.text("export_all", language, url=url)
    return ComposedAnswer(text, [], [Attachment(name="forms.csv", url=url, media_type="text/csv")])


def no_answer(question: str, chunks: list[RetrievedChunk], *, language: str, contact: str) -> ComposedAnswer:
    """The honest "not found" reply, with up to three weakly related articles when some share a term."""
    text = messages.text("no_answer", language, contact=contact)
    wanted = query_terms(question)
    related = [c for c in chunks if wanted & text_terms(f"{c.title} {c.heading} {c.text}")] if wanted else []
    if not related:
        return ComposedAnswer(text)
    book = _SourceBook()
    for chunk in related:
        if len(book.sources) == 3:
            break
        book.ref(chunk)
    lines = [text, "", messages.text("related", language)]
    lines.extend(f"[{s.ref}] {s.title} ({s.url})" for s in book.sources)
    return ComposedAnswer("\n".join(lines), book.sources)


def out_of_scope_answer(language: str, text: str = "") -> ComposedAnswer:
    """The organisation's out-of-scope reply (`text`), or the neutral one."""
    return ComposedAnswer(text or messages.text("out_of_scope", language))


def answer_body(answer: str) -> str:
    """The answer without its sources block."""
    for label in messages.SOURCE_LABELS:
        cut = answer.rfind("\n\n" + label)
        if cut != -1:
            return answer[:cut]
    return answer


def updated_summary(previous: str, question: str, answer: str, *, cap: int = _SUMMARY_CAP) -> str:
    """The running conversation summary: earlier turns plus "Q: question A: first sentence", newest kept."""
    sentences = split_sentences(answer_body(answer), min_chars=1)
    first = _CITATION_RE.sub("", sentences[0] if sentences else answer).strip()[:_SUMMARY_ANSWER_CHARS]
    turn = f"Q: {' '.join(question.split())[:_SUMMARY_ANSWER_CHARS]} A: {first}"
    combined = f"{previous.strip()} {turn}".strip() if previous.strip() else turn
    if len(combined) <= cap:
        return combined
    tail = combined[-cap:]
    start = tail.find("Q: ")
    return tail[start:] if start > 0 else tail
