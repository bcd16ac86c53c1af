"""The sentences of a retrieved passage that may stand in an answer: its text without the headings in it.

The chunker keeps the headings of the small sections it merges into one chunk as plain lines of the text (no
"#"), so their words are still found, and only the main section's path is the chunk's `heading`; a "Title >
Heading" context line can also stand in front of a passage. Such a line names a topic instead of saying anything:
quoted, it reads as a fragment ("Service desk phone [1].") or as the question itself ("退選會影響研習時數嗎[1]？").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.offline.terms import split_sentences
from rag.retrieval.chunking import ChunkingConfig, text_units
from rag.state import RetrievedChunk

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


@dataclass(frozen=True, slots=True)
class Sentence:
    text: str
    section: str = ""  # the heading line it stands under inside the chunk's text ("" above the first one)


def answer_sentences(chunk: RetrievedChunk) -> list[Sentence]:
    """The sentences of the chunk's text (`split_sentences`), each with the heading line above it; the heading
    lines themselves are left out."""
    sentences: list[Sentence] = []
    section = ""
    for line, is_heading in _marked_lines(chunk.text, title=chunk.title, heading=chunk.heading):
        if is_heading:
            section = line.strip()
        else:
            sentences.extend(Sentence(text, section) for text in split_sentences(line))
    return sentences


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
