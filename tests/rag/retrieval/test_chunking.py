from __future__ import annotations

import itertools

import pytest

from rag.retrieval.chunking import (
    ChunkingConfig,
    chunk_document,
    split_sections,
    split_sentences,
    text_units,
)
from rag.retrieval.markdown import Document


def doc(text: str, *, title: str = "如何重設密碼", language: str = "zh-hant") -> Document:
    return Document(doc_id="d", title=title, text=text, language=language, url="u", tags=("t",), content_hash="h")


def test_units_count_cjk_characters_and_latin_words() -> None:
    assert text_units("重設密碼") == 4
    assert text_units("reset your password") == 3
    assert text_units("連結有效 30 分鐘, valid for 30 minutes!") == 4 + 1 + 2 + 4
    assert text_units("。，！ --- **") == 0


def test_sentences_split_on_cjk_and_latin_ends_and_lines() -> None:
    assert split_sentences("第一句。第二句！第三句？「引號。」後面") == [
        "第一句。",
        "第二句！",
        "第三句？",
        "「引號。」",
        "後面",
    ]
    assert split_sentences("One. Two! Three? v1.2 stays\n- item") == ["One.", "Two!", "Three?", "v1.2 stays", "- item"]


def test_sections_keep_heading_paths_and_ignore_code_fences() -> None:
    sections = split_sections("intro\n# A\na\n## B\nb\n```\n# not a heading\n```\n### C\nc\n## D\nd\n# E\ne")
    assert [s.path for s in sections] == [(), ("A",), ("A", "B"), ("A", "B", "C"), ("A", "D"), ("E",)]
    assert "# not a heading" in sections[2].body


def test_chunks_carry_heading_path_metadata_and_context_prefix() -> None:
    text = (
        "# 如何重設密碼？\n\n"
        + "忘記密碼時可以自行重設。" * 8
        + "\n\n## 重設密碼步驟\n\n"
        + "在登入頁面點選忘記密碼並輸入帳號。" * 6
        + "\n\n## 注意事項\n\n"
        + "工作人員不會以電話索取密碼，請勿告訴任何人。" * 4
    )
    chunks = chunk_document(doc(text))
    assert [c.heading for c in chunks] == [
        "如何重設密碼？",
        "如何重設密碼？ > 重設密碼步驟",
        "如何重設密碼？ > 注意事項",
    ]
    assert [c.chunk_id for c in chunks] == ["d#0", "d#1", "d#2"]
    assert [c.ordinal for c in chunks] == [0, 1, 2]
    # the first heading says the title already, so it is not repeated
    assert chunks[2].embed_text.startswith("如何重設密碼？ > 注意事項\n")
    assert chunks[2].text.startswith("工作人員")
    assert (chunks[0].title, chunks[0].url, chunks[0].language, chunks[0].tags) == (
        "如何重設密碼",
        "u",
        "zh-hant",
        ("t",),
    )
    assert chunks[0].content_hash == "h"


def test_title_is_prefixed_when_headings_do_not_say_it() -> None:
    chunks = chunk_document(doc("## 注意事項\n\n" + "請勿把密碼告訴任何人。" * 10))
    assert chunks[0].heading == "注意事項"
    assert chunks[0].embed_text.startswith("如何重設密碼 > 注意事項\n")


def test_tiny_sections_merge_and_keep_their_heading_as_text() -> None:
    text = "# Title\n\n" + "intro words here. " * 30 + "\n\n## Tiny\n\nJust a line.\n\n## Big\n\n" + "word " * 120
    chunks = chunk_document(doc(text, title="Title", language="en"), ChunkingConfig(min_units=20))
    assert len(chunks) == 2
    assert "Tiny\nJust a line." in chunks[0].text
    assert chunks[1].heading == "Title > Big"


@pytest.mark.parametrize(
    ("sentence", "language"),
    [
        ("這是一個關於線上課程報名與審核流程的說明句子。", "zh-hant"),
        ("This sentence explains how enrolment works. ", "en"),
    ],
)
def test_long_sections_split_within_size_with_one_sentence_overlap(sentence: str, language: str) -> None:
    config = ChunkingConfig(target_units=100, max_units=150, min_units=10)
    body = "\n\n".join(
        "".join(f"{sentence.strip()[:-1]} {p}-{i}{sentence.strip()[-1]} " for i in range(4)) for p in range(12)
    )
    chunks = chunk_document(doc(f"## Section\n\n{body}", language=language), config)
    assert len(chunks) > 3
    assert all(text_units(c.text) <= config.max_units for c in chunks)
    assert all(c.heading == "Section" for c in chunks)
    for previous, current in itertools.pairwise(chunks):
        last_sentence = split_sentences(previous.text)[-1]
        assert current.text.startswith(last_sentence)  # the overlap
    # every sentence of the section survives in some chunk
    joined = " ".join(c.text for c in chunks)
    assert all(f"{p}-{i}" in joined for p in range(12) for i in range(4))


def test_an_unpunctuated_run_is_cut_hard_at_max_units() -> None:
    config = ChunkingConfig(target_units=50, max_units=80, min_units=10)
    chunks = chunk_document(doc("字" * 300), config)
    assert all(text_units(c.text) <= 80 for c in chunks)
    assert sum(text_units(c.text) for c in chunks) >= 300


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        ChunkingConfig(target_units=600, max_units=500)


def test_the_units_counted_line_by_line_are_those_of_each_merged_text() -> None:
    from pathlib import Path

    from rag.retrieval.chunking import _merge_tiny
    from rag.retrieval.markdown import load_markdown_dir

    corpus = Path(__file__).resolve().parents[3] / "rag" / "corpus" / "demo"
    tricky = "# 標題 Title\n\n短。\n\n## 小節 A-1\n\ntext 文字\n### 更深\n\n" + "長句子 long words 123。" * 80
    texts = [document.text for document in load_markdown_dir(corpus)] + [tricky]
    for config in (ChunkingConfig(), ChunkingConfig(target_units=60, max_units=80, min_units=30)):
        groups = [group for text in texts for group in _merge_tiny(split_sections(text), config)]
        assert len(groups) > len(texts)  # some documents have several groups
        for _, text, units in groups:
            assert units == text_units(text)


def test_a_long_table_is_split_between_rows_and_every_piece_repeats_its_header() -> None:
    header = ["| 身分 | 每門課費用 | 備註 |", "| --- | --- | --- |"]
    rows = [f"| 身分{i} | {i * 100:,} 元 | 需於開課前兩週申請並附上證明文件 |" for i in range(60)]
    text = "## 旁聽收費標準\n\n旁聽生依身分收費：\n" + "\n".join(header + rows) + "\n\n以上費用每學期調整一次。"
    chunks = chunk_document(doc(text))
    assert len(chunks) > 2
    found: list[str] = []
    for chunk in chunks:
        lines = chunk.text.splitlines()
        table = [line for line in lines if line.startswith("|")]
        assert table[:2] == header  # each piece is a table of its own: header, separator, whole rows
        assert all(line.count("|") == 4 for line in table)
        found.extend(table[2:])
    assert found == rows  # every row once, in order, none cut or carried over
    assert "旁聽生依身分收費：" in chunks[0].text and "以上費用每學期調整一次。" in chunks[-1].text
