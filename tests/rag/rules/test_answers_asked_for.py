"""Offline answers give what was asked for, on a small help site indexed in the test (tests/rag/rules/answer_site.py):
a phone number whole, no padding, no "Yes" borrowed from another question, every step of a procedure, the row of
a table that was asked about."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.retrieval.chunking import Chunk, chunk_document
from rag.retrieval.loaders import load_documents
from rag.retrieval.markdown import LoadError, document_from_text
from rag.rules.answers import answer_body, extractive_answer
from rag.runtime import PipelineRuntime
from rag.state import RetrievedChunk
from tests.rag.rules.answer_site import PAGES, ask, site_runtime


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineRuntime]:
    yield from site_runtime(tmp_path_factory.mktemp("site"))


async def body(runtime: PipelineRuntime, question: str) -> str:
    return answer_body((await ask(runtime, question)).answer)


async def test_a_phone_extension_stays_with_its_number(runtime: PipelineRuntime) -> None:
    text = await body(runtime, "What is the phone number of the IT service desk?")
    assert "02-2345-6789 ext. 88100 [1]." in text
    assert "ext [1]" not in text and "ext. [1]" not in text


async def test_an_answer_is_only_the_sentence_that_answers(runtime: PipelineRuntime) -> None:
    text = await body(runtime, "What is the maximum file size for an assignment upload?")
    assert text == "The maximum file size for an assignment upload is 100 MB [1]."
    zh = await body(runtime, "密碼連續輸錯幾次會被鎖定？")
    assert zh == "密碼連續輸錯 5 次，帳號會被鎖定 15 分鐘[1]。"  # not the sentence about account IDs before it


async def test_a_yes_no_question_the_site_does_not_answer_gets_no_yes(runtime: PipelineRuntime) -> None:
    state = await ask(runtime, "Can lecturers export grades to Excel?")
    text = answer_body(state.answer)
    assert "Yes" not in text and "[1]" not in text.split("\n\n")[0]
    assert text.startswith("Sorry, I couldn't find an answer")


async def test_a_yes_no_question_is_answered_by_the_sentence_under_its_heading(runtime: PipelineRuntime) -> None:
    text = await body(runtime, "Can I resubmit an assignment?")
    assert text == "Yes, until the deadline, unless your lecturer has turned off resubmission [1]."


async def test_every_numbered_step_is_given_with_its_number(runtime: PipelineRuntime) -> None:
    text = await body(runtime, "如何繳交作業？")
    assert re.findall(r"^(\d)\. ", text, flags=re.MULTILINE) == ["1", "2", "3", "4", "5", "6", "7"]
    assert "4. 點選「上傳檔案」" in text
    assert text.index("「儲存變更」：檔案只會存成草稿") < text.index("「送出作業」：送出後老師才看得到")


async def test_a_question_about_one_row_gets_that_row_under_its_header(runtime: PipelineRuntime) -> None:
    text = await body(runtime, "校外人士旁聽一門課要多少錢？")
    lines = text.splitlines()
    header = lines.index("| 身分 | 每門課費用 | 備註 |")
    assert lines[header + 1 :] == ["| --- | --- | --- |", "| 校外人士 | 2,500 元 | 需於開課前兩週申請 |"]
    assert "本校校友" not in text and "高中生" not in text
    assert lines[0] == "旁聽收費標準[1]："


STEPS = [
    "登入數位學習平台。",
    "進入課程頁面，點選「作業」分頁。",
    "點選要繳交的作業名稱。",
    "點選「上傳檔案」，選擇要繳交的檔案。",
    "點選「儲存變更」：檔案只會存成草稿，老師還看不到。",
    "確認檔案無誤後，點選「送出作業」：送出後老師才看得到。",
    "畫面顯示「已送出」即完成繳交。",
]
NUMBERED = "".join(f"{i}. {step}\n" for i, step in enumerate(STEPS, 1))
PROCEDURE_FILES = {
    "submit.html": (
        '<html lang="zh-Hant"><head><title>如何繳交作業</title></head><body><nav>首頁</nav><main>'
        "<h1>如何繳交作業</h1><p>繳交作業前請先確認檔案格式。</p><ol>"
        + "".join(f"<li>{step}</li>" for step in STEPS)
        + "</ol></main></body></html>"
    ),
    "submit.txt": "如何繳交作業\n\n繳交作業前請先確認檔案格式。\n" + NUMBERED,
    "submit.md": "# 如何繳交作業\n\n繳交作業前請先確認檔案格式。\n\n" + NUMBERED,
}


@pytest.mark.parametrize("name", sorted(PROCEDURE_FILES))
def test_a_procedure_keeps_every_step_and_its_number_from_html_text_and_markdown(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(PROCEDURE_FILES[name], encoding="utf-8")
    errors: list[LoadError] = []
    [document] = load_documents(tmp_path, errors=errors, language="zh-hant")
    chunks = [retrieved(chunk) for chunk in chunk_document(document)]
    result = extractive_answer("如何繳交作業？", chunks, language="zh-hant")
    assert not errors and result is not None
    text = answer_body(result.text)
    numbered = re.findall(r"^(\d)\. (.+)$", text.replace("[1]", ""), flags=re.MULTILINE)
    assert numbered == [(str(i), step) for i, step in enumerate(STEPS, 1)]


def retrieved(chunk: Chunk) -> RetrievedChunk:
    fields = ("chunk_id", "doc_id", "title", "url", "text", "language", "heading", "kind")
    return RetrievedChunk(score=1.0, **{field: getattr(chunk, field) for field in fields})


def test_a_passage_only_in_the_other_language_is_quoted_after_a_notice() -> None:
    zh = next(iter(chunk_document(document_from_text(PAGES["zh-online-exam"], doc_id="zh-online-exam"))))
    en = next(iter(chunk_document(document_from_text(PAGES["en-library"], doc_id="en-library"))))
    result = extractive_answer("Online exam: is a webcam (鏡頭) needed?", [retrieved(zh)], language="en")
    assert result is not None
    text = answer_body(result.text)
    notice, quoted = text.split("\n\n", 1)
    assert notice == "The help centre has this only in Chinese; here is the passage as written:"
    assert quoted.startswith("線上考試期間必須全程開啟視訊鏡頭[1]。")
    same = extractive_answer("How long is a library laptop loan?", [retrieved(en)], language="en")
    assert same is not None and not same.text.startswith("The help centre has this only")
