"""Offline answers read like a help-centre agent's: whole sentences across line wraps, whole procedures in order
with their conditions, the lists the text announces, no headings as sentences, only cited sources."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rag.retrieval.chunking import chunk_document
from rag.retrieval.markdown import document_from_text, load_markdown_file
from rag.rules import answers
from rag.state import RetrievedChunk

DEMO = Path(__file__).resolve().parents[3] / "rag" / "corpus" / "demo"


def retrieved(document_chunks: list[RetrievedChunk], *others: RetrievedChunk) -> list[RetrievedChunk]:
    return [*document_chunks, *others]


def chunks_of(text: str, doc_id: str = "doc") -> list[RetrievedChunk]:
    document = document_from_text(text, doc_id=doc_id)
    return [_as_retrieved(chunk) for chunk in chunk_document(document)]


def demo_chunks(name: str) -> list[RetrievedChunk]:
    return [_as_retrieved(chunk) for chunk in chunk_document(load_markdown_file(DEMO / name, root=DEMO))]


def _as_retrieved(chunk: object) -> RetrievedChunk:
    fields = ("chunk_id", "doc_id", "title", "url", "text", "language", "heading", "kind")
    return RetrievedChunk(score=1.0, **{name: getattr(chunk, name) for name in fields})


def body_of(question: str, chunks: list[RetrievedChunk], language: str) -> str:
    result = answers.extractive_answer(question, chunks, language=language)
    assert result is not None
    return answers.answer_body(result.text)


WRAPPED = """---
title: Getting to the training centre
url: https://help.example/en/campus
language: en
---

# Getting to the training centre

## Parking

Cars park in the basement of building B, entrance on Zhongshan Road.
Scooters park at the
west gate behind the canteen. Bicycles may use either.
"""


def test_a_sentence_wrapped_over_two_lines_is_answered_whole() -> None:
    body = body_of("Where do scooters park?", chunks_of(WRAPPED), "en")
    assert "Scooters park at the west gate behind the canteen [1]." in body
    assert "Scooters park at the [1]." not in body


def test_a_how_do_i_question_gets_every_step_in_order_with_its_conditions() -> None:
    chunks = demo_chunks("zh-password-reset.md") + demo_chunks("zh-account-locked.md")
    body = body_of("如何重設密碼？", chunks, "zh-hant")
    steps = re.findall(r"^(\d)\. ", body, flags=re.MULTILINE)
    assert steps == ["1", "2", "3", "4", "5", "6"]
    assert body.index("點選右上角「登入」") < body.index("忘記密碼") < body.index("寄送重設連結")
    assert "連結有效時間為 30 分鐘，且只能使用一次" in body  # the condition inside step 5
    assert "長度至少 12 個字元" in body and "不可與最近 3 次使用過的密碼相同" in body  # the rules under the steps
    assert "重設密碼步驟" not in body  # the section's heading is not a sentence of the answer


def test_the_english_procedure_is_whole_too() -> None:
    body = body_of("How do I reset my password?", demo_chunks("en-password-reset.md"), "en")
    assert re.findall(r"^(\d)\. ", body, flags=re.MULTILINE) == ["1", "2", "3", "4", "5", "6"]
    assert "valid for 30 minutes" in body


def test_a_quantity_question_is_not_answered_with_a_procedure() -> None:
    body = body_of("重設連結的有效時間多久？", demo_chunks("zh-password-reset.md"), "zh-hant")
    assert "30 分鐘" in body
    assert not re.search(r"^1\. ", body, flags=re.MULTILINE)


def test_an_announced_list_is_given_with_the_sentence_that_announces_it() -> None:
    body = body_of("What browsers are supported?", demo_chunks("en-browser-requirements.md"), "en")
    assert "We support the latest 2 major versions of:\n- Google Chrome\n- Microsoft Edge" in body
    assert "- Apple Safari (macOS and iPadOS) [1]" in body
    assert "Internet Explorer is not supported [1]." in body  # a bold sentence is a sentence, not "IE...: If"


def test_a_bold_clause_keeps_its_comma() -> None:
    body = body_of("候補名單什麼時候關閉？", demo_chunks("zh-waiting-list.md"), "zh-hant")
    assert "開課日前 2 天，候補名單會關閉，未遞補者" in body
    assert "：，" not in body


def test_only_cited_sources_are_listed() -> None:
    chunks = demo_chunks("en-browser-requirements.md") + demo_chunks("en-contact.md")
    result = answers.extractive_answer("What browsers are supported?", chunks, language="en")
    assert result is not None
    cited = {int(ref) for ref in re.findall(r"\[(\d+)\]", answers.answer_body(result.text))}
    assert {source.ref for source in result.sources} == cited


@pytest.mark.parametrize(
    ("article", "question", "language", "announcement"),
    [
        ("en-hours-missing.md", "My hours are missing, what should I do?", "en", "check the following in order"),
        ("zh-hours-missing.md", "上完課了但是研習時數沒有出現", "zh-hant", "請依下列順序檢查"),
    ],
)
def test_a_sentence_announcing_a_list_that_is_not_there_is_left_out(
    article: str, question: str, language: str, announcement: str
) -> None:
    # the sentence announces the steps of the next sections, which are other chunks: alone it promises nothing
    body = body_of(question, demo_chunks(article), language)
    assert announcement not in body
    assert body.strip()


def test_a_sentence_that_only_mentions_an_age_limit_is_no_announcement() -> None:
    from rag.rules.passages import announces_list

    assert announces_list("請依下列順序檢查。") and announces_list("Check the following in order.")
    assert not announces_list("未滿 18 歲以下者須由家長同意。")
    assert not announces_list("Hours are uploaded on the following day.")


def test_another_articles_steps_do_not_answer_a_question_they_only_mention() -> None:
    # the waiting list's "加入候補" steps say 取消報名 in passing; the withdrawal article answers
    chunks = demo_chunks("zh-withdrawal.md")[1:2] + demo_chunks("zh-waiting-list.md")
    body = body_of("怎麼取消報名？", chunks, "zh-hant")
    assert "加入候補" not in body
    assert "自行取消報名" in body


def test_a_table_after_the_steps_is_not_quoted_row_by_row() -> None:
    chunks = demo_chunks("zh-enrolment.md")
    # ranked as the demo index ranks them: the classroom courses' steps first, the status table under them next
    chunks.sort(key=lambda c: 0 if "機關薦派" in c.text else 1 if "|" in c.text else 2)
    body = body_of("如何報名課程？", chunks, "zh-hant")
    assert "機關薦派" in body
    assert re.search(r"^1\. ", body, flags=re.MULTILINE)
    assert "[1]。" not in body.splitlines() and "；意義" not in body and "|" not in body
