"""Markdown pipe tables, the one shape tables take in chunk text."""

from __future__ import annotations

from rag.text.tables import Table, cells, is_separator, read_table


def test_cells_unescape_a_pipe_inside_a_cell() -> None:
    assert cells("| Guest \\| visitor | NT$2,500 |") == ["Guest | visitor", "NT$2,500"]
    assert cells("|a|b|") == ["a", "b"]


def test_a_separator_line_is_dashes_between_pipes() -> None:
    assert is_separator("| --- | :---: |") and is_separator("|---|---|")
    assert not is_separator("| 1,000 | - |")


def test_a_table_reads_its_header_and_rows() -> None:
    table = read_table(["| 身分 | 費用 |", "| --- | --- |", "| 校友 | 1,000 元 |", "| 校外人士 | 2,500 元 |"])
    assert table == Table(("| 身分 | 費用 |", "| --- | --- |"), ("| 校友 | 1,000 元 |", "| 校外人士 | 2,500 元 |"))
    assert table.markdown(("| 校外人士 | 2,500 元 |",)) == "| 身分 | 費用 |\n| --- | --- |\n| 校外人士 | 2,500 元 |"
    assert read_table(["| a | b |", "| c | d |"]).header == ()
