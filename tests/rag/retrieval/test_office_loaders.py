"""Office files (.docx, .xlsx, .pptx) read by the real libraries, written here by the same libraries."""

from __future__ import annotations

from pathlib import Path

import docx
import openpyxl
import pptx
from pptx.util import Inches

from rag.retrieval.chunking import chunk_document
from rag.retrieval.loaders import LoadError, load_documents


def write_docx(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("旁聽申請須知", level=1)
    document.add_paragraph("校外人士可申請旁聽課程。")
    document.add_heading("申請步驟", level=2)
    document.add_paragraph("填寫申請表", style="List Number")
    document.add_paragraph("繳交費用", style="List Number")
    table = document.add_table(rows=3, cols=2)
    values_by_row = [("身分", "每學分費用"), ("本校學生", "免費"), ("校外人士", "2,000 元")]
    for row, values in zip(table.rows, values_by_row, strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.save(str(path))
    return path


def write_xlsx(path: Path) -> Path:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Fees"
    for row in [("Who", "Fee"), ("Students", "free"), ("Visitors", "NT$ 2,000 | per credit")]:
        sheet.append(row)
    second = workbook.create_sheet("Deadlines")
    second.append(("Term", "Closes"))
    second.append(("Spring", "15 March"))
    workbook.save(str(path))
    return path


def write_pptx(path: Path) -> Path:
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Library orientation"
    slide.placeholders[1].text = "Borrow up to 20 books"
    slide.notes_slide.notes_text_frame.text = "Mention the late fee of NT$ 5 a day."
    table_slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    table_slide.shapes.title.text = "Opening hours"
    shape = table_slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(6), Inches(1))
    for (r, c), value in {(0, 0): "Day", (0, 1): "Hours", (1, 0): "Monday", (1, 1): "8:00-22:00"}.items():
        shape.table.cell(r, c).text = value
    presentation.save(str(path))
    return path


def test_docx_keeps_headings_lists_and_tables(tmp_path: Path) -> None:
    errors: list[LoadError] = []
    [document] = load_documents(write_docx(tmp_path / "audit.docx"), errors=errors)
    assert errors == []
    assert document.doc_id == "audit.docx" and document.title == "旁聽申請須知" and document.language == "zh-hant"
    assert "## 申請步驟" in document.text and "- 填寫申請表" in document.text
    assert "| 身分 | 每學分費用 |\n| --- | --- |\n| 本校學生 | 免費 |\n| 校外人士 | 2,000 元 |" in document.text


def test_xlsx_gives_each_sheet_a_heading_and_a_table(tmp_path: Path) -> None:
    errors: list[LoadError] = []
    [document] = load_documents(write_xlsx(tmp_path / "fees.xlsx"), errors=errors)
    assert errors == []
    assert "## Fees\n\n| Who | Fee |\n| --- | --- |\n| Students | free |\n| Visitors | NT$ 2,000 \\| per credit |" in (
        document.text
    )
    assert "## Deadlines\n\n| Term | Closes |\n| --- | --- |\n| Spring | 15 March |" in document.text
    chunks = chunk_document(document)
    assert any(chunk.heading == "Fees" and "| Visitors |" in chunk.text for chunk in chunks)


def test_pptx_reads_slides_tables_and_notes(tmp_path: Path) -> None:
    errors: list[LoadError] = []
    [document] = load_documents(write_pptx(tmp_path / "orientation.pptx"), errors=errors)
    assert errors == []
    assert document.title == "Library orientation"
    assert "## Library orientation" in document.text and "Borrow up to 20 books" in document.text
    assert "Notes: Mention the late fee of NT$ 5 a day." in document.text
    assert "| Day | Hours |\n| --- | --- |\n| Monday | 8:00-22:00 |" in document.text


def test_a_mislabelled_office_file_is_skipped_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "fake.docx").write_text("not a zip")
    errors: list[LoadError] = []
    assert load_documents(tmp_path / "fake.docx", errors=errors) == []
    assert "not a zip archive" in errors[0].reason
