"""Headings never become answer sentences, and the text under them always stays one."""

import re
from pathlib import Path

import pytest

from rag.retrieval.chunking import chunk_document
from rag.retrieval.markdown import load_markdown_dir
from rag.rules.passages import answer_sentences, without_headings
from rag.rules.terms import split_sentences
from rag.state import RetrievedChunk
from rag.text.tables import Table, is_table_line, read_table
from tests.rag.chunk_fixtures import WITHDRAWAL_FAQ_ZH

DEMO = Path(__file__).resolve().parents[3] / "rag" / "corpus" / "demo"
_HEADING_RE = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _demo_chunks() -> list[tuple[RetrievedChunk, set[str]]]:
    """Every chunk of the demo articles as retrieval returns it, with the sentences its document's headings make."""
    chunks = []
    for document in load_markdown_dir(DEMO):
        headings = {s for h in _HEADING_RE.findall(document.text) for s in split_sentences(h, min_chars=1)}
        for chunk in chunk_document(document):
            retrieved = RetrievedChunk(
                chunk_id=chunk.chunk_id,
                doc_id=chunk.doc_id,
                title=chunk.title,
                url=chunk.url,
                text=chunk.text,
                score=1.0,
                language=chunk.language,
                heading=chunk.heading,
                kind=chunk.kind,
            )
            chunks.append((retrieved, headings | {document.title}))
    return chunks


DEMO_CHUNKS = _demo_chunks()


def test_the_demo_corpus_has_headings_inside_chunk_texts():
    # what the rule is for: merged sections leave their headings in the text as plain lines
    inside = [c for c, headings in DEMO_CHUNKS if set(split_sentences(c.text)) & headings]
    assert len(inside) > 50
    assert {c.language for c in inside} == {"en", "zh-hant"}


@pytest.mark.parametrize("chunk, headings", DEMO_CHUNKS, ids=[c.chunk_id for c, _ in DEMO_CHUNKS])
def test_every_demo_chunk_keeps_its_text_and_drops_its_headings(chunk, headings):
    kept = [s.text for s in answer_sentences(chunk)]
    assert not set(kept) & headings
    # every line's sentence is kept, whole or as the start of a sentence whose wrapped lines were joined to it
    everything = " ".join(kept)
    # a table's rows are sentences of their cells; its header line is not (it is given with a row, not alone)
    prose = "\n".join(line for line in chunk.text.splitlines() if not is_table_line(line))
    assert all(s in everything for s in split_sentences(prose) if s not in headings)
    rows = [s for s in answer_sentences(chunk) if s.row]
    assert [s.row for s in rows] == [row for table in tables_of(chunk.text) for row in table.rows]


def tables_of(text: str) -> list[Table]:
    runs: list[list[str]] = [[]]
    for line in [*text.splitlines(), ""]:
        if is_table_line(line):
            runs[-1].append(line.strip())
        elif runs[-1]:
            runs.append([])
    return [read_table(run) for run in runs if run]


def test_a_table_row_is_a_sentence_of_its_cells_that_keeps_its_row_and_header():
    text = "Fees by status.\n\n| Status | Fee |\n| --- | --- |\n| Alumni | NT$1,000 |\n| Guest \\| visitor | NT$2,500 |"
    chunk = RetrievedChunk(chunk_id="t#0", doc_id="t", title="Fees", url="", score=1.0, text=text)
    rows = [s for s in answer_sentences(chunk) if s.row]
    assert [(s.text, s.row, s.table) for s in rows] == [
        ("Alumni；NT$1,000", "| Alumni | NT$1,000 |", ("| Status | Fee |", "| --- | --- |")),
        ("Guest | visitor；NT$2,500", "| Guest \\| visitor | NT$2,500 |", ("| Status | Fee |", "| --- | --- |")),
    ]


def test_a_numbered_heading_goes_and_a_list_of_short_items_stays():
    text = "1. Account ID and password\nThe usual way to log in.\n\n- Chrome 120 or later\n- Edge 120 or later"
    kept = without_headings(text, title="Login methods", heading="Login methods > Overview")
    assert split_sentences(kept) == ["The usual way to log in.", "Chrome 120 or later", "Edge 120 or later"]


def test_text_that_is_only_unpunctuated_is_not_taken_for_a_heading():
    text = (
        "Reset\n"
        "You can reset your password from the login page when\n"
        "you have forgotten it.\n"
        "\n"
        "100 臺北市中正區示範路 100 號 5 樓　數位學習推動中心　學習e站服務組\n"
        "（郵寄申請表時，信封請註明表單編號。）"
    )
    kept = split_sentences(without_headings(text, title="Passwords", heading="Passwords > Reset"))
    assert "Reset" not in kept
    assert kept[0] == "You can reset your password from the login page when"
    assert kept[2].startswith("100 臺北市中正區")


def test_a_chunk_without_sections_keeps_every_line_but_its_title():
    # plain text and PDF chunks have no heading path, and their lines are often wrapped without punctuation
    text = "Password help\nIf you forgot your password\nselect Forgot password on the login page"
    assert split_sentences(without_headings(text, title="Password help", heading="")) == [
        "If you forgot your password",
        "select Forgot password on the login page",
    ]


def test_a_title_and_heading_context_line_goes_wherever_it_stands():
    text = "Intro line.\n如何重設密碼 > 重設密碼步驟\n在登入頁面點選「忘記密碼」。"
    kept = without_headings(text, title="如何重設密碼", heading="重設密碼步驟")
    assert split_sentences(kept) == ["Intro line.", "在登入頁面點選「忘記密碼」。"]


def test_each_sentence_knows_the_heading_it_stands_under():
    sentences = answer_sentences(WITHDRAWAL_FAQ_ZH)
    sections = {s.text: s.section for s in sentences}
    assert sections["不會扣除已取得的時數。"] == "退選會影響研習時數嗎？"
    assert sections["錄取實體課程卻未出席、也未事先取消，會被記錄為「未到」。"] == "未出席的影響"
    assert all(s.section != s.text for s in sentences)
