"""The sentences of a retrieved passage that may stand in an answer: its text without the headings in it.

The chunker keeps the headings of the small sections it merges into one chunk as plain lines of the text (no
"#"), so their words are still found, and only the main section's path is the chunk's `heading`; a "Title >
Heading" context line can also stand in front of a passage. Such a line names a topic instead of saying anything:
quoted, it reads as a fragment ("Service desk phone [1].") or as the question itself ("退選會影響研習時數嗎[1]？").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.retrieval.chunking import ChunkingConfig, text_units
from rag.rules.terms import split_sentences
from rag.state import RetrievedChunk
from rag.text.tables import cells, read_table

_SEPARATOR = ChunkingConfig().heading_separator
_NOT_WORD_RE = re.compile(r"[\W_]+")
_INLINE_RE = re.compile(r"\*\*|__|`")
# A line that ends like prose (a sentence, a clause, a lead-in to a list) is text, whatever its length.
_PROSE_END_RE = re.compile(r"[。.！!；;：:，,、]$")
_CLOSERS = "」』”’）)]\"'*_` "
_LIST_ITEM_RE = re.compile(r"^(?:[-*+]|\d+[.)、])\s+")
_NEVER_HEADING = ("|", "#", "---", ">", "![")  # table rows, Markdown headings, rules, quotes, images
# Longer than every heading of the demo help centre (12 words, 17 CJK characters) by a margin: a longer line
# without closing punctuation is text someone did not punctuate, not a heading.
_MAX_HEADING_UNITS = 20
# a sentence that says a list follows although it ends like any other: "請依下列順序檢查。", "as follows."
_ANNOUNCE_RE = re.compile(
    r"下列|如下|以下(?:的|幾|各|方式|步驟|程序|順序|情形|條件|項目|說明|文件|資料)|"
    r"the following(?! (?:day|week|month|year|morning|evening))|as follows|these steps",
    re.IGNORECASE,
)
_CJK_CHARS = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_END_RE = re.compile(f"[{_CJK_CHARS}]$")
_CJK_START_RE = re.compile(f"[{_CJK_CHARS}]")


@dataclass(frozen=True, slots=True)
class Sentence:
    text: str
    section: str = ""  # the heading line it stands under inside the chunk's text ("" above the first one)
    # the list this sentence announces ("...請依下列步驟：", "We support:"), each item a whole text
    items: tuple[str, ...] = ()
    ordered: bool = False  # the announced list is numbered (steps)
    in_list: bool = False  # the sentence is (part of) a list item
    row: str = ""  # the table row it is, as written (its text is the row's cells)
    table: tuple[str, ...] = ()  # that table's header and separator lines


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph (one text, its wrapped lines joined) or a list (each item whole), under a heading line."""

    kind: str  # "paragraph" | "ordered" | "bullets" | "table" (its lines, header and separator included)
    texts: tuple[str, ...]
    section: str = ""


def answer_sentences(chunk: RetrievedChunk) -> list[Sentence]:
    """The sentences of the chunk's text (`split_sentences`), each with the heading line above it; the heading
    lines themselves are left out. A sentence wrapped over several lines is one sentence, and one that announces
    the list right after it carries the list's items."""
    sentences: list[Sentence] = []
    blocks = passage_blocks(chunk.text, title=chunk.title, heading=chunk.heading)
    for index, block in enumerate(blocks):
        if block.kind == "table":
            sentences.extend(_row_sentences(block))
            continue
        if block.kind != "paragraph":
            for item in block.texts:
                sentences.extend(Sentence(text, block.section, in_list=True) for text in split_sentences(item))
            continue
        pieces = split_sentences(block.texts[0])
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        for number, text in enumerate(pieces):
            announced = following is not None and following.kind != "paragraph" and number == len(pieces) - 1
            if announced and following is not None and announces_list(text):
                items = tuple(item for item in following.texts if split_sentences(item, min_chars=1))
                sentences.append(Sentence(text, block.section, items=items, ordered=following.kind == "ordered"))
            else:
                sentences.append(Sentence(text, block.section))
    return sentences


def _row_sentences(block: Block) -> list[Sentence]:
    """A table's rows, each a sentence of its cells that carries its row and the table's header."""
    table = read_table(list(block.texts))
    return [
        Sentence("；".join(cell for cell in cells(row) if cell), block.section, row=row, table=table.header)
        for row in table.rows
        if any(cells(row))
    ]


def announces_list(sentence: str) -> bool:
    """ "...請依下列順序檢查。", "常見的有：", "We support the latest versions of:"."""
    return sentence.rstrip(_CLOSERS).endswith((":", "：")) or bool(_ANNOUNCE_RE.search(sentence))


def passage_blocks(text: str, *, title: str, heading: str) -> list[Block]:
    """The chunk's text as paragraphs and lists, heading lines left out (each names the section of what follows).

    Lines of a paragraph are joined (a hard-wrapped sentence is one sentence again); so are an item's wrapped
    lines. A blank line, a heading, a table row or a list marker ends a paragraph.
    """
    blocks: list[Block] = []
    section = ""
    kind = ""  # the block being read
    texts: list[str] = []

    def close() -> None:
        nonlocal kind, texts
        if texts:
            blocks.append(Block(kind, tuple(texts), section))
        kind, texts = "", []

    for raw, is_heading in _marked_lines(text, title=title, heading=heading):
        line = raw.strip()
        if is_heading or line.startswith("#"):
            close()
            section = line.lstrip("#").strip()
        elif line.startswith("|"):
            if kind != "table":
                close()
                kind = "table"
            texts.append(line)  # a table's lines, one block: the rows are read under their header
        elif not line or line.startswith(("---", "![")):
            close()
        elif marker := _LIST_ITEM_RE.match(line):
            item_kind = "ordered" if marker.group().strip()[0].isdigit() else "bullets"
            if kind != item_kind:
                close()
                kind = item_kind
            texts.append(line)
        elif kind in ("ordered", "bullets") and raw[:1].isspace():
            texts[-1] = join_wrapped(texts[-1], line)  # an item's wrapped line, indented under it
        elif kind == "paragraph":
            texts[-1] = join_wrapped(texts[-1], line)
        else:
            close()
            kind, texts = "paragraph", [line]
    close()
    return blocks


def join_wrapped(first: str, second: str) -> str:
    """Two lines of one sentence: no space between Chinese characters (a wrap is no word break there)."""
    if _CJK_END_RE.search(first) and _CJK_START_RE.match(second):
        return first + second
    return f"{first} {second}"


def without_headings(text: str, *, title: str, heading: str) -> str:
    """The text with its heading lines blanked (so the paragraphs around them stay apart).

    A heading line is one that says the chunk's title, a heading of its path or the "Title > Heading" context,
    or, in a chunk cut from a document with sections (`heading` set), one that opens a paragraph without
    closing it: short, with no closing punctuation, and followed by a new line of its own.
    """
    marked = _marked_lines(text, title=title, heading=heading)
    return "\n".join("" if is_heading else line for line, is_heading in marked)


def _marked_lines(text: str, *, title: str, heading: str) -> list[tuple[str, bool]]:
    """Each line of the text, with whether it is a heading (see `without_headings`)."""
    known = _heading_keys(title, heading)
    lines = text.splitlines()
    return [
        (line, _key(line) in known or bool(heading and _opens_section(lines, index)))
        for index, line in enumerate(lines)
    ]


def _key(text: str) -> str:
    return _NOT_WORD_RE.sub("", _INLINE_RE.sub("", text)).lower()


def _heading_keys(title: str, heading: str) -> set[str]:
    parts = [part for part in heading.split(_SEPARATOR) if part.strip()]
    path = "".join(_key(part) for part in parts)
    keys = {_key(title), path, _key(title) + path, *(_key(part) for part in parts)}
    keys.discard("")
    return keys


def _opens_section(lines: list[str], index: int) -> bool:
    line = _INLINE_RE.sub("", lines[index]).strip()
    if not line or (index > 0 and lines[index - 1].strip()) or line.startswith(_NEVER_HEADING):
        return False  # blank, inside a paragraph, or a line that is not a heading's shape
    if _PROSE_END_RE.search(line.rstrip(_CLOSERS)) or text_units(line) > _MAX_HEADING_UNITS:
        return False
    following = lines[index + 1].strip() if index + 1 < len(lines) else ""
    if _LIST_ITEM_RE.match(line) and (not following or _LIST_ITEM_RE.match(following)):
        return False  # an item of a list (a numbered heading is followed by its text instead)
    return not following[:1].islower()  # a lower-case next line goes on with a wrapped sentence
