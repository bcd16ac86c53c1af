"""Markdown pipe tables in chunk text: the one shape every loader writes a table in.

A header line `| h1 | h2 |`, a separator `| --- | --- |`, one line per row; `\\|` escapes a pipe inside a cell.
Every chunk holding part of a table repeats its header and separator, so a row read from any chunk can be
given with the header that says what its cells are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEPARATOR_RE = re.compile(r"^\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?$")
_CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")


def is_table_line(line: str) -> bool:
    return line.lstrip().startswith("|")


def is_separator(line: str) -> bool:
    return bool(_SEPARATOR_RE.match(line.strip()))


def cells(line: str) -> list[str]:
    """The cells of a table line, stripped, escaped pipes unescaped: `| a \\| b | c |` -> ["a | b", "c"]."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT_RE.split(body)]


@dataclass(frozen=True, slots=True)
class Table:
    """A pipe table's lines: `header` is the header line and its separator (empty for a table without one)."""

    header: tuple[str, ...]
    rows: tuple[str, ...]

    def markdown(self, rows: tuple[str, ...] | None = None) -> str:
        """The table (or only `rows` of it) under its header, one line each."""
        return "\n".join([*self.header, *(self.rows if rows is None else rows)])


def read_table(lines: list[str]) -> Table:
    """Consecutive table lines as a table: the first line is the header when a separator follows it."""
    stripped = [line.strip() for line in lines if line.strip()]
    if len(stripped) >= 2 and is_separator(stripped[1]):
        return Table((stripped[0], stripped[1]), tuple(line for line in stripped[2:] if not is_separator(line)))
    return Table((), tuple(line for line in stripped if not is_separator(line)))
