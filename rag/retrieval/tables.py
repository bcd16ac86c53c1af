"""Tables in chunk text: one format for every source, so a row is always read with its header.

The format is a GitHub-style Markdown pipe table::

    | Who | Fee |
    | --- | --- |
    | Visitors | NT$ 2,000 |

A header line, a separator line, then one line per row; a ``|`` inside a cell is written ``\\|`` and a newline in
a cell is folded to a space. A table without a header row uses its first row as the header. HTML ``<table>``,
.docx tables, .xlsx sheets and Markdown pipe tables all come out this way (`render_table`, `canonical_tables`),
and a table split across chunks repeats its header line and separator in every chunk (`table_pieces`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_SEPARATOR_RE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_SPACE_RE = re.compile(r"\s+")
SEPARATOR_CELL = "---"


def cell_text(value: object) -> str:
    """A cell's text on one line, its pipes escaped."""
    text = "" if value is None else str(value)
    text = _SPACE_RE.sub(" ", text).strip()
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_table(rows: Sequence[Sequence[object]]) -> str:
    """The table whose first row is the header ("" for a table with no text at all). Rows are padded to the
    widest; empty rows are dropped."""
    cleaned = [[cell_text(cell) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(cleaned_cell for cleaned_cell in row)]
    if not cleaned:
        return ""
    width = max(len(row) for row in cleaned)
    padded = [row + [""] * (width - len(row)) for row in cleaned]
    header, body = padded[0], padded[1:]
    return "\n".join([_line(header), _line([SEPARATOR_CELL] * width), *(_line(row) for row in body)])


def split_row(line: str) -> list[str]:
    """The cells of one pipe-table line (escaped pipes stay in their cell, still escaped)."""
    stripped = line.strip()
    if stripped.startswith("|"):
        stripped = stripped[1:]
    if stripped.endswith("|") and not stripped.endswith("\\|"):
        stripped = stripped[:-1]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", stripped)]


def is_separator(line: str) -> bool:
    return "-" in line and bool(_SEPARATOR_RE.match(line))


def _is_row(line: str) -> bool:
    return "|" in line and bool(line.strip())


def canonical_tables(text: str) -> str:
    """`text` with every Markdown pipe table (a row line followed by a separator line) rewritten in the one
    format; everything else untouched."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if _is_row(line) and index + 1 < len(lines) and is_separator(lines[index + 1]):
            rows = [split_row(line)]
            index += 2
            while index < len(lines) and _is_row(lines[index]) and not is_separator(lines[index]):
                rows.append(split_row(lines[index]))
                index += 1
            # cells are already escaped: render without escaping them twice
            width = max(len(row) for row in rows)
            padded = [row + [""] * (width - len(row)) for row in rows]
            out.extend([_line(padded[0]), _line([SEPARATOR_CELL] * width), *(_line(row) for row in padded[1:])])
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


def is_table(block: str) -> bool:
    """Whether a paragraph is one pipe table (header, separator, rows) and nothing else."""
    lines = [line for line in block.strip().split("\n") if line.strip()]
    return len(lines) >= 2 and _is_row(lines[0]) and is_separator(lines[1]) and all(_is_row(x) for x in lines[2:])


def table_pieces(block: str, *, target: int, units: Callable[[str], int]) -> list[str]:
    """A table split into pieces of about `target` units, each starting with the header line and separator."""
    lines = [line for line in block.strip().split("\n") if line.strip()]
    head = lines[:2]
    head_units = units(head[0])
    pieces: list[str] = []
    current: list[str] = []
    size = head_units
    for row in lines[2:]:
        row_units = units(row)
        if current and size + row_units > target:
            pieces.append("\n".join(head + current))
            current, size = [], head_units
        current.append(row)
        size += row_units
    if current or not pieces:
        pieces.append("\n".join(head + current))
    return pieces
