""" "How do I ...?" questions: the whole ordered procedure of the article that answers them, with its conditions.

A procedure is written either as one numbered list or as sections, one per step ("第一步：…", "Step 2: …"), each
its own chunk. Retrieval finds some of those chunks, never reliably all: when the best passage is such a step, the
answer step fetches the article's chunks (`step_sections_doc` says which article) and gives every step, in order.

Sentence picking (answers.extractive_answer) keeps the sentences that share most words with the question, which
for "如何重設密碼？" are steps 2 and 4 and a note: a reader needs every step, in order, and what qualifies them (the
link's validity inside a step, the password rules under it). So a procedural question whose best-matching
retrieved chunk holds a numbered list is answered with that chunk's lead-in, the whole list, what the chunk says
after it in the same section, and the retrieved sub-sections of that section (a rules list under "新密碼規則").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.retrieval.chunking import ChunkingConfig
from rag.rules.passages import Block, passage_blocks
from rag.rules.terms import query_terms, text_terms
from rag.state import RetrievedChunk

_SEPARATOR = ChunkingConfig().heading_separator
_PROCEDURE_RE = re.compile(
    r"如何|怎麼|怎么|怎樣|怎样|步驟|步骤|流程|程序|辦理|办理|"
    r"\bhow\b|\bsteps?\b|\bprocedure\b|\bprocess\b|\bwhat (?:do|should) i do\b",
    re.IGNORECASE,
)
# "How long / how many / 多久 / 多少": a quantity, not a procedure.
_QUANTITY_RE = re.compile(
    r"\bhow (?:long|many|much|often|old|far|soon|big)\b|多久|多少|幾|几|何時|何时|什麼時候|什么时候", re.IGNORECASE
)
_MIN_OVERLAP = 0.5  # of the question's terms found in the chunk (title and headings included)
_RANK_PENALTY = 0.2
_SEARCH_DEPTH = 3  # chunks, best first, that may hold the procedure
_TRAILING_BLOCKS = 3
# A heading that numbers a step: "第一步：…", "步驟 2", "Step 3: …".
_STEP_HEADING_RE = re.compile(
    r"^\W*(?:第\s*[一二三四五六七八九十百\d]+\s*步|步[驟骤]\s*[一二三四五六七八九十百\d]+|step\s*\d+\b)", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Procedure:
    chunk: RetrievedChunk  # the chunk whose numbered list is the procedure
    lead: tuple[Block, ...]  # paragraphs of its section before the list (what it is for, what it takes)
    steps: Block
    after: tuple[Block, ...]  # what follows the list in its section
    subsections: tuple[tuple[RetrievedChunk, tuple[Block, ...]], ...]  # retrieved chunks of sections under it


def is_procedural(question: str) -> bool:
    return bool(_PROCEDURE_RE.search(question)) and not _QUANTITY_RE.search(question)


def find_procedure(question: str, chunks: list[RetrievedChunk]) -> Procedure | None:
    """The procedure answering a procedural question, or None (not procedural, or no fitting numbered list)."""
    if not is_procedural(question):
        return None
    wanted = query_terms(question)
    if not wanted:
        return None
    best: tuple[float, RetrievedChunk, list[Block], int] | None = None
    for rank, chunk in enumerate(chunks[:_SEARCH_DEPTH]):
        blocks = passage_blocks(chunk.text, title=chunk.title, heading=chunk.heading)
        steps_at = next((i for i, block in enumerate(blocks) if block.kind == "ordered" and len(block.texts) > 1), -1)
        if steps_at < 0:
            continue
        found = len(wanted & text_terms(f"{chunk.title} {chunk.heading} {chunk.text}")) / len(wanted)
        # an article titled with the question's words is about it; one that mentions them in a step is not
        about = len(wanted & text_terms(f"{chunk.title} {chunk.heading}")) / len(wanted)
        score = (found + about) / (1 + _RANK_PENALTY * rank)
        # another article's steps answer the question only when it is about it ("加入候補" steps mention 取消報名)
        if chunk.doc_id != chunks[0].doc_id and about < _MIN_OVERLAP:
            continue
        if found >= _MIN_OVERLAP and (best is None or score > best[0]):
            best = (score, chunk, blocks, steps_at)
    if best is None:
        return None
    _, chunk, blocks, steps_at = best
    steps = blocks[steps_at]
    lead = tuple(b for b in blocks[:steps_at] if b.kind == "paragraph" and b.section in ("", steps.section))
    after: list[Block] = []
    for block in blocks[steps_at + 1 :]:
        if block.section != steps.section or len(after) == _TRAILING_BLOCKS or _is_table(block):
            break  # a table after the steps is reference matter, not one of their conditions
        after.append(block)
    return Procedure(chunk, lead[-2:], steps, tuple(after), _subsections(chunk, chunks))


Subsection = tuple[RetrievedChunk, tuple[Block, ...]]


def _subsections(parent: RetrievedChunk, chunks: list[RetrievedChunk]) -> tuple[Subsection, ...]:
    """Retrieved chunks of the same document under the parent's section, in document order."""
    prefix = parent.heading + _SEPARATOR
    below = [c for c in chunks if c.doc_id == parent.doc_id and c.heading.startswith(prefix) and c is not parent]
    below.sort(key=lambda c: _ordinal(c.chunk_id))
    return tuple(
        (c, tuple(b for b in passage_blocks(c.text, title=c.title, heading=c.heading) if not _is_table(b)))
        for c in below
    )


def _is_table(block: Block) -> bool:
    return block.kind == "table"


def _ordinal(chunk_id: str) -> int:
    tail = chunk_id.rsplit("#", 1)[-1]
    return int(tail) if tail.isdigit() else 0


@dataclass(frozen=True, slots=True)
class StepSection:
    """One step of a procedure written as sections: its heading and what it says (paragraphs and lists)."""

    chunk: RetrievedChunk
    label: str
    blocks: tuple[Block, ...]


def is_step_heading(text: str) -> bool:
    return bool(_STEP_HEADING_RE.match(text))


def step_sections_doc(question: str, chunks: list[RetrievedChunk]) -> str:
    """The doc_id of the article whose step sections answer a procedural question: the best chunk's, when it is
    (or holds) a step section; "" otherwise."""
    if not chunks or not is_procedural(question):
        return ""
    return chunks[0].doc_id if _chunk_steps(chunks[0]) else ""


def step_sections(chunks: list[RetrievedChunk]) -> tuple[StepSection, ...]:
    """The step sections of one document's chunks, in the document's order; a step a merged chunk holds among
    other sections is found by its heading line."""
    steps: list[StepSection] = []
    for chunk in sorted(chunks, key=lambda c: _ordinal(c.chunk_id)):
        for label, blocks in _chunk_steps(chunk):
            if steps and steps[-1].label == label:  # a step whose text goes on in the next chunk
                steps[-1] = StepSection(steps[-1].chunk, label, steps[-1].blocks + blocks)
            else:
                steps.append(StepSection(chunk, label, blocks))
    return tuple(steps)


def _chunk_steps(chunk: RetrievedChunk) -> list[tuple[str, tuple[Block, ...]]]:
    """(step heading, its blocks) of the steps in one chunk, in order."""
    own = chunk.heading.rsplit(_SEPARATOR, 1)[-1].strip() if chunk.heading else ""
    blocks = passage_blocks(chunk.text, title=chunk.title, heading=chunk.heading)
    # Blocks above every heading line belong to the chunk's own section, unless its heading line is in the text:
    # then they are what comes before that section (an article's opening, merged with its first step).
    own_line_in_text = any(block.section == own for block in blocks)
    grouped: dict[str, list[Block]] = {}
    for block in blocks:
        section = block.section or ("" if own_line_in_text else own)
        if section and is_step_heading(section) and not _is_table(block):
            grouped.setdefault(section, []).append(block)
    return [(label, tuple(found)) for label, found in grouped.items()]
