"""Tables stay tables: one pipe-table format from every loader, and a split table repeats its header."""

from __future__ import annotations

from rag.retrieval.chunking import ChunkingConfig, chunk_document
from rag.retrieval.loaders.html import html_to_text
from rag.retrieval.markdown import Document
from rag.retrieval.tables import canonical_tables, render_table, split_row

HEADER = "| 身分 | 每學分費用 |"
SEPARATOR = "| --- | --- |"


def test_render_escapes_pipes_folds_newlines_and_pads_rows() -> None:
    table = render_table([["a|b", "c"], ["line\none"], []])
    assert table == "| a\\|b | c |\n| --- | --- |\n| line one |  |"
    assert split_row("| a\\|b | c |") == ["a\\|b", "c"]


def test_an_html_table_without_th_uses_its_first_row_as_the_header() -> None:
    _, text = html_to_text(
        "<main><h1>旁聽費用</h1><table><tr><td>身分</td><td>每學分費用</td></tr>"
        "<tr><td>校外人士</td><td>2,000 元</td></tr></table></main>"
    )
    assert f"{HEADER}\n{SEPARATOR}\n| 校外人士 | 2,000 元 |" in text


def test_markdown_tables_are_rewritten_in_the_one_format() -> None:
    expected = "intro\n| a | b |\n| --- | --- |\n| 1 | 2 |\nafter"
    assert canonical_tables("intro\n|a|b|\n|:-|-:|\n|1|2|\nafter") == expected
    assert canonical_tables("a | b\nnot a table") == "a | b\nnot a table"


def test_a_long_table_is_split_between_rows_and_every_chunk_repeats_the_header() -> None:
    rows = [["身分", "每學分費用"]] + [[f"第{i}類學員", f"{1000 + i} 元"] for i in range(60)]
    text = "# 旁聽費用\n\n下表為各類學員的費用。\n\n" + render_table(rows)
    document = Document(doc_id="fees", title="旁聽費用", text=text, language="zh-hant")
    chunks = chunk_document(document, ChunkingConfig(target_units=120, max_units=160, min_units=10))
    table_chunks = [chunk for chunk in chunks if "第" in chunk.text]
    assert len(table_chunks) > 2
    seen: list[str] = []
    for chunk in table_chunks:
        lines = chunk.text[chunk.text.index(HEADER) :].split("\n")
        assert lines[:2] == [HEADER, SEPARATOR]
        assert all(line.startswith("| 第") for line in lines[2:])
        seen.extend(lines[2:])
    assert seen == [f"| 第{i}類學員 | {1000 + i} 元 |" for i in range(60)]  # every row once, in order
