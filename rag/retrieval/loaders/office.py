"""Office files as Markdown-style text: .docx (headings, lists, tables), .xlsx (each sheet a table), .pptx
(slides and their notes), read with python-docx, openpyxl and python-pptx.

Tables come out in the one pipe-table format (rag.retrieval.tables); headings become ``#`` lines so the chunker
splits on them as it does for Markdown and HTML. A file the library cannot open (not a zip, encrypted, damaged)
is a `SkipFile` with the library's reason.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rag.retrieval.loaders.base import SkipFile, content_hash, join_cjk_gaps, resolve_language
from rag.retrieval.markdown import Document, LoadError
from rag.retrieval.tables import render_table

# a spreadsheet can hold a million rows; past this many per sheet the rest is left out (and said so)
MAX_SHEET_ROWS = 5000
_MAX_TITLE = 200


def _open_zip(path: Path) -> bytes:
    data = path.read_bytes()
    if not zipfile.is_zipfile(path):
        raise SkipFile("not an Office Open XML file (not a zip archive): broken, encrypted or an older format")
    return data


def _document(path: Path, *, doc_id: str, title: str, body: str, data: bytes, language: str | None) -> Document:
    body = join_cjk_gaps(body).strip()
    if not body:
        raise SkipFile("no text in the file")
    return Document(
        doc_id=doc_id,
        title=(title or path.stem)[:_MAX_TITLE],
        text=body,
        language=resolve_language(body, language),
        content_hash=content_hash(data),
        source_path=str(path),
    )


# --- .docx ---------------------------------------------------------------------------------------------------


def _docx_blocks(document: Any) -> Iterator[Any]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            yield Paragraph(child, document)
        elif tag == "tbl":
            yield Table(child, document)


def _docx_table(table: Any) -> str:
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # a merged cell is returned once per grid column it spans: keep it once
            if previous is not None and cell._tc is previous:
                continue
            previous = cell._tc
            cells.append(cell.text)
        rows.append(cells)
    return render_table(rows)


def _docx_paragraph(paragraph: Any) -> tuple[str, int]:
    """(line, heading level or 0)."""
    text = paragraph.text.strip()
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if not text:
        return "", 0
    if style == "Title":
        return text, -1
    if style.startswith("Heading"):
        level = style.removeprefix("Heading").strip()
        depth = int(level) if level.isdigit() else 1
        return f"{'#' * min(max(depth, 1), 6)} {text}", depth
    numbered = paragraph._p.pPr is not None and paragraph._p.pPr.numPr is not None
    if "List" in style or numbered:
        return f"- {text}", 0
    return text, 0


def load_docx(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    import docx
    from docx.table import Table

    data = _open_zip(path)
    try:
        document = docx.Document(str(path))
    except Exception as exc:
        raise SkipFile(f"cannot be opened as .docx ({type(exc).__name__}: {exc})") from exc
    title = (document.core_properties.title or "").strip()
    parts: list[str] = []
    for block in _docx_blocks(document):
        if isinstance(block, Table):
            table = _docx_table(block)
            if table:
                parts.append(table)
            continue
        line, level = _docx_paragraph(block)
        if not line:
            continue
        if level == -1 or (level == 1 and not title):
            title = title or line.lstrip("# ").strip()
            if level == -1:
                continue
        parts.append(line)
    return [_document(path, doc_id=doc_id, title=title, body="\n\n".join(parts), data=data, language=language)]


# --- .xlsx ---------------------------------------------------------------------------------------------------


def _sheet_rows(sheet: Any, notes: list[str]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for index, row in enumerate(sheet.iter_rows(values_only=True)):
        if index >= MAX_SHEET_ROWS:
            notes.append(f"sheet {sheet.title!r}: only the first {MAX_SHEET_ROWS} rows were read")
            break
        values = ["" if value is None else value for value in row]
        while values and values[-1] == "":
            values.pop()
        if values:
            rows.append(values)
    return rows


def load_xlsx(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    import openpyxl

    data = _open_zip(path)
    try:
        workbook = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    except Exception as exc:
        raise SkipFile(f"cannot be opened as .xlsx ({type(exc).__name__}: {exc})") from exc
    parts: list[str] = []
    notes: list[str] = []
    try:
        title = (workbook.properties.title or "").strip()
        for sheet in workbook.worksheets:
            table = render_table(_sheet_rows(sheet, notes))
            if table:
                # the sheet's name as a heading line before its table
                parts.append(f"## {sheet.title}\n\n{table}")
    finally:
        workbook.close()
    errors.extend(LoadError(path, note) for note in notes)
    return [_document(path, doc_id=doc_id, title=title, body="\n\n".join(parts), data=data, language=language)]


# --- .pptx ---------------------------------------------------------------------------------------------------


def _slide_parts(slide: Any) -> tuple[str, list[str]]:
    title_shape = slide.shapes.title
    title = title_shape.text_frame.text.strip() if title_shape is not None and title_shape.has_text_frame else ""
    parts: list[str] = []
    for shape in slide.shapes:
        if shape is title_shape:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            table = render_table([[cell.text for cell in row.cells] for row in shape.table.rows])
            if table:
                parts.append(table)
        elif shape.has_text_frame:
            for paragraph in shape.text_frame.paragraphs:
                text = "".join(run.text for run in paragraph.runs).strip()
                if text:
                    parts.append(f"- {text}" if paragraph.level else text)
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame.text.strip() if slide.notes_slide.notes_text_frame else ""
        if notes:
            parts.append(f"Notes: {notes}")
    return title, parts


def load_pptx(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    import pptx

    data = _open_zip(path)
    try:
        presentation = pptx.Presentation(str(path))
    except Exception as exc:
        raise SkipFile(f"cannot be opened as .pptx ({type(exc).__name__}: {exc})") from exc
    title = (presentation.core_properties.title or "").strip()
    sections: list[str] = []
    for number, slide in enumerate(presentation.slides, start=1):
        slide_title, parts = _slide_parts(slide)
        title = title or slide_title
        heading = f"## {slide_title}" if slide_title else f"## Slide {number}"
        sections.append("\n\n".join([heading, *parts]))
    return [_document(path, doc_id=doc_id, title=title, body="\n\n".join(sections), data=data, language=language)]
