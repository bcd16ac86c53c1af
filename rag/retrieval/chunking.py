"""Heading-aware chunking with CJK-aware sizes.

A help article is a set of answers under headings, so chunks follow the headings: each keeps its heading path
("如何重設密碼 > 重設密碼步驟") for citations, and the path (with the title) is prefixed to the text that is
embedded, so a section like "注意事項" still matches questions about its article. Sizes are counted in units
that mean the same in both scripts: one CJK character or one Latin word/number is one unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.retrieval.markdown import Document
from rag.retrieval.tables import canonical_tables
from rag.text.sentences import stop_ends_sentence
from rag.text.tables import is_table_line, read_table

_HEADING_RE = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_UNIT_RE = re.compile(rf"[{_CJK}]|[A-Za-z0-9\u00c0-\u024f]+")
# A sentence ends after CJK 。！？ (plus closing quotes/brackets), or after Latin .!? followed by a space.
_SENTENCE_END_RE = re.compile(r"(?<=[。！？；])[」』”’）)]*|(?<=[.!?])[\"')\]]*(?=\s)")
_PUNCT_RE = re.compile(r"[\W_]+")


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    target_units: int = 350  # pack paragraphs up to about this size
    max_units: int = 500  # a chunk never exceeds this (except a single over-long "word")
    min_units: int = 60  # a section smaller than this is merged with its neighbour
    overlap_sentences: int = 1  # sentences repeated at the start of the next piece of a split section
    heading_separator: str = " > "

    def __post_init__(self) -> None:
        if not 0 < self.min_units <= self.target_units <= self.max_units:
            raise ValueError("need 0 < min_units <= target_units <= max_units")
        if self.overlap_sentences < 0:
            raise ValueError("overlap_sentences must be >= 0")


# For passages their source already cut out (a SQuAD paragraph, one FAQ answer): such a passage is a retrieval unit
# as it is, and splitting it spreads its words over two chunks that each match its questions less well (DRCD dev:
# recall@1 0.949 with the default sizes, 0.950 whole, see docs/benchmarks/retrieval.md). Passages above
# `max_units` are still split, so one huge "paragraph" cannot flood the answer's context.
PASSAGE_CHUNKING = ChunkingConfig(target_units=600, max_units=1000)


@dataclass(frozen=True, slots=True)
class Chunk:
    chunk_id: str  # f"{doc_id}#{ordinal}": stable while the document's structure is
    doc_id: str
    ordinal: int
    heading: str
    text: str  # what is shown and quoted
    embed_text: str  # title/heading context + text: what the embedder and BM25 see
    title: str
    url: str
    language: str
    tags: tuple[str, ...] = ()
    kind: str = "article"
    form_id: str = ""
    form_file: str = ""
    content_hash: str = ""


def text_units(text: str) -> int:
    """Size in units: each CJK character and each Latin word or number counts one."""
    return len(_UNIT_RE.findall(text))


@dataclass(slots=True)
class _Section:
    path: tuple[str, ...]
    lines: list[str]
    units: int = 0  # text_units(body), once _merge_tiny counted them

    @property
    def body(self) -> str:
        return "\n".join(self.lines).strip()


def split_sections(markdown: str) -> list[_Section]:
    """Sections by ATX heading, each with the path of headings above it; code fences are not parsed."""
    sections = [_Section((), [])]
    stack: list[tuple[int, str]] = []
    in_fence = False
    for line in markdown.splitlines():
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        match = None if in_fence else _HEADING_RE.match(line)
        if match is None:
            sections[-1].lines.append(line)
            continue
        level, title = len(match.group(1)), match.group(2).strip()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        sections.append(_Section(tuple(t for _, t in stack), []))
    return [s for s in sections if s.body or s.path]


def split_sentences(text: str) -> list[str]:
    """Sentences and lines (a list item is a sentence too), whitespace kept inside, empty ones dropped."""
    out: list[str] = []
    for line in text.splitlines():
        start = 0
        for match in _SENTENCE_END_RE.finditer(line):
            if line[match.start() - 1] == "." and not stop_ends_sentence(line, match.start() - 1):
                continue  # "ext. 88100", "Dr. Lin": the stop shortens a word
            end = match.end()
            if end > start:
                out.append(line[start:end].strip())
            start = end
        out.append(line[start:].strip())
    return [s for s in out if s]


def _hard_split(sentence: str, size: int) -> list[str]:
    """Cut a sentence without punctuation into pieces of at most `size` units, at unit boundaries."""
    pieces: list[str] = []
    start, count = 0, 0
    for match in _UNIT_RE.finditer(sentence):
        if count == size:
            pieces.append(sentence[start : match.start()].strip())
            start, count = match.start(), 0
        count += 1
    pieces.append(sentence[start:].strip())
    return [p for p in pieces if p]


def _join(parts: list[str]) -> str:
    # CJK sentences run on without spaces; Latin ones need one
    out = ""
    for part in parts:
        if out and not (_is_cjk_edge(out[-1]) and _is_cjk_edge(part[0])):
            out += " "
        out += part
    return out


def _is_cjk_edge(char: str) -> bool:
    return bool(re.match(rf"[{_CJK}\u3000-\u303f\uff00-\uffef]", char))


def split_long(text: str, config: ChunkingConfig, *, size: int | None = None) -> list[str]:
    """Split text above `max_units` at paragraph, then sentence boundaries; pieces aim at `target_units`.
    `size`: `text_units(text)`, when the caller knows it."""
    if (text_units(text) if size is None else size) <= config.max_units:
        return [text]
    # units: paragraphs that fit, else their sentences; each unit is (text, size, starts_paragraph)
    units: list[tuple[str, int, bool]] = []
    for paragraph in _table_apart(re.split(r"\n\s*\n", text)):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        size = text_units(paragraph)
        if is_table_line(paragraph):
            units.extend(_table_units(paragraph, config))
            continue
        if size <= config.target_units:
            units.append((paragraph, size, True))
            continue
        first = True
        for sentence in split_sentences(paragraph):
            for piece in (
                _hard_split(sentence, config.max_units) if text_units(sentence) > config.max_units else [sentence]
            ):
                units.append((piece, text_units(piece), first))
                first = False
    pieces: list[str] = []
    current: list[tuple[str, int, bool]] = []
    size = 0
    for unit in units:
        if current and size + unit[1] > config.target_units:
            pieces.append(_render(current))
            # carry the last sentence(s) over so an answer straddling the cut is whole in one piece
            carry = _carry(current, config.overlap_sentences)
            # a long sentence is not worth repeating, and the overlap must never push a piece over the max
            if (
                sum(c[1] for c in carry) > config.target_units // 3
                or sum(c[1] for c in carry) + unit[1] > config.max_units
            ):
                carry = []
            current, size = list(carry), sum(c[1] for c in carry)
        current.append(unit)
        size += unit[1]
    if current:
        pieces.append(_render(current))
    return pieces


def _table_apart(paragraphs: list[str]) -> list[str]:
    """The paragraphs with each pipe table a paragraph of its own (a line of text may run into a table)."""
    out: list[str] = []
    for paragraph in paragraphs:
        lines = paragraph.strip().splitlines()
        run: list[str] = []
        for line in lines:
            if run and is_table_line(line) != is_table_line(run[-1]):
                out.append("\n".join(run))
                run = []
            run.append(line)
        out.append("\n".join(run))
    return out


def _table_units(table_text: str, config: ChunkingConfig) -> list[tuple[str, int, bool]]:
    """A pipe table as units of whole rows, each under the table's header and separator (repeated in every
    piece, so a row is always read with what its cells are); a table that fits is one unit."""
    size = text_units(table_text)
    if size <= config.target_units:
        return [(table_text, size, True)]
    table = read_table(table_text.splitlines())
    header_size = text_units(table.markdown(()))
    units: list[tuple[str, int, bool]] = []
    rows: list[str] = []
    rows_size = 0
    for row in table.rows:
        row_size = text_units(row)
        if rows and header_size + rows_size + row_size > config.target_units:
            units.append((table.markdown(tuple(rows)), header_size + rows_size, True))
            rows, rows_size = [], 0
        rows.append(row)
        rows_size += row_size
    if rows:
        units.append((table.markdown(tuple(rows)), header_size + rows_size, True))
    return units


def _carry(units: list[tuple[str, int, bool]], count: int) -> list[tuple[str, int, bool]]:
    """The last `count` sentences of a piece, as units starting a new paragraph (none after a table: a row
    carried alone would lose its header)."""
    if count <= 0 or is_table_line(units[-1][0]):
        return []
    sentences: list[str] = []
    for text, _, _ in reversed(units):
        sentences = split_sentences(text) + sentences
        if len(sentences) >= count:
            break
    tail = sentences[-count:]
    return [(s, text_units(s), i == 0) for i, s in enumerate(tail)]


def _render(units: list[tuple[str, int, bool]]) -> str:
    paragraphs: list[list[str]] = []
    for text, _, starts_paragraph in units:
        if starts_paragraph or not paragraphs:
            paragraphs.append([text])
        else:
            paragraphs[-1].append(text)
    return "\n\n".join(_join(p) for p in paragraphs)


def _common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    prefix = paths[0]
    for path in paths[1:]:
        n = 0
        while n < min(len(prefix), len(path)) and prefix[n] == path[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def _same_words(a: str, b: str) -> bool:
    return _PUNCT_RE.sub("", a).lower() == _PUNCT_RE.sub("", b).lower()


def _merge_tiny(sections: list[_Section], config: ChunkingConfig) -> list[tuple[tuple[str, ...], str, int]]:
    """Groups of sections as (heading path, text, its units); a tiny section joins its neighbour up to
    `target_units`."""
    groups: list[tuple[list[_Section], int]] = []
    for section in sections:
        section.units = text_units(section.body)
        size = section.units + text_units(section.path[-1] if section.path else "")
        if groups:
            members, total = groups[-1]
            if (total < config.min_units or size < config.min_units) and total + size <= config.target_units:
                members.append(section)
                groups[-1] = (members, total + size)
                continue
        groups.append(([section], size))
    out: list[tuple[tuple[str, ...], str, int]] = []
    for members, _ in groups:
        prefix = _common_prefix([m.path for m in members])
        # headings below the shared path stay in the text as lines, so a merged section keeps its words
        emitted: set[tuple[str, ...]] = set()
        parts: list[str] = []
        # the text's units, line by line: no unit spans a line break, so they add up
        units = 0
        for member in members:
            lines = []
            for depth in range(len(prefix), len(member.path)):
                key = member.path[: depth + 1]
                if key not in emitted:
                    emitted.add(key)
                    lines.append(member.path[depth])
                    units += text_units(member.path[depth])
            if member.body:
                lines.append(member.body)
                units += member.units
            if lines:
                parts.append("\n".join(lines))
        text = "\n\n".join(parts).strip()
        if text:
            # cite the section that carries most of the text; the others' headings are lines in the text
            main = max(members, key=lambda m: m.units) if len(members) > 1 else members[0]
            out.append((main.path, text, units))
    return out


def chunk_document(document: Document, config: ChunkingConfig | None = None) -> list[Chunk]:
    """The document's chunks in reading order, ordinals from 0."""
    config = config or ChunkingConfig()
    chunks: list[Chunk] = []
    # Markdown pipe tables in the one format every loader writes (rag.retrieval.tables)
    for path, text, units in _merge_tiny(split_sections(canonical_tables(document.text)), config):
        heading = config.heading_separator.join(path)
        # the title gives every chunk its article's topic, unless the first heading already says it
        context_parts = list(path)
        if not context_parts or not _same_words(context_parts[0], document.title):
            context_parts.insert(0, document.title)
        context = config.heading_separator.join(context_parts)
        for piece in split_long(text, config, size=units):
            ordinal = len(chunks)
            chunks.append(
                Chunk(
                    chunk_id=f"{document.doc_id}#{ordinal}",
                    doc_id=document.doc_id,
                    ordinal=ordinal,
                    heading=heading,
                    text=piece,
                    embed_text=f"{context}\n{piece}",
                    title=document.title,
                    url=document.url,
                    language=document.language,
                    tags=document.tags,
                    kind=document.kind,
                    form_id=document.form_id,
                    form_file=document.form_file,
                    content_hash=document.content_hash,
                )
            )
    return chunks
