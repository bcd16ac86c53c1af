"""A procedure written as sections, one per step ("第一步：…", "Step 2: …"), is given whole and in order when a
how-to question's best passage is one of its steps: from the article's chunks when the answer step has them, else
from the steps retrieved."""

from __future__ import annotations

import re

import pytest

from rag.rules import answers
from rag.rules.procedures import is_step_heading, step_sections
from tests.rag.rules.test_answers_complete import demo_chunks

ZH_LABELS = ["第一步：確認課程是否真的「已完成」", "第二步：查看上傳狀態", "第三步：確認是否使用了另一個帳號"]
EN_LABELS = ['Step 1: Is the course really "Completed"?', "Step 2: Check the reporting status"]
EN_LABELS.append("Step 3: Did you use a different account?")


def labels(body: str) -> list[str]:
    return re.findall(r"^\*\*(.+)\*\*$", body, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("article", "question", "language", "expected", "inside", "step_2"),
    [
        (
            "zh-hours-missing.md",
            "上完課但查不到研習時數，要怎麼檢查？",
            "zh-hant",
            ZH_LABELS,
            "課後測驗未達 60 分",
            "3 個工作天內上傳",
        ),
        (
            "en-hours-missing.md",
            "How do I find my missing learning hours?",
            "en",
            EN_LABELS,
            "quiz score is below 60",
            "within 3 working days",
        ),
    ],
)
def test_every_step_is_given_in_order_from_the_articles_chunks(
    article: str, question: str, language: str, expected: list[str], inside: str, step_2: str
) -> None:
    document = demo_chunks(article)
    retrieved = [c for c in document if "Step 2" in c.heading or "第二步" in c.heading]  # one step found
    assert len(retrieved) == 1
    result = answers.extractive_answer(question, retrieved, language=language, document=document)
    assert result is not None
    body = answers.answer_body(result.text)
    assert labels(body) == expected
    assert body.index(expected[0]) < body.index(inside) < body.index(expected[1])  # step 1's text, not retrieved
    assert body.index(expected[1]) < body.index(step_2) < body.index(expected[2])
    assert "仍然找不到" not in body and "Still missing" not in body  # the section after the steps is no step
    assert [source.doc_id for source in result.sources] == [article.removesuffix(".md")]


def test_without_the_articles_chunks_the_steps_retrieved_are_given_in_order() -> None:
    chunks = demo_chunks("zh-hours-missing.md")
    retrieved = [chunks[2], chunks[0]]  # the third step ranked above the first
    result = answers.extractive_answer("研習時數沒有出現怎麼辦？", retrieved, language="zh-hant")
    assert result is not None
    assert labels(answers.answer_body(result.text)) == [ZH_LABELS[0], ZH_LABELS[2]]


def test_a_question_that_is_not_a_how_to_gets_sentences_not_steps() -> None:
    chunks = demo_chunks("zh-hours-missing.md")
    result = answers.extractive_answer("待上傳的時數多久會上傳？", chunks[1:2], language="zh-hant", document=chunks)
    assert result is not None
    assert labels(answers.answer_body(result.text)) == []
    assert "3 個工作天內上傳" in result.text


def test_a_numbered_list_in_one_section_is_still_the_procedure() -> None:
    chunks = demo_chunks("zh-password-reset.md")
    result = answers.extractive_answer("如何重設密碼？", chunks, language="zh-hant", document=chunks)
    assert result is not None
    body = answers.answer_body(result.text)
    assert re.findall(r"^(\d)\. ", body, flags=re.MULTILINE) == ["1", "2", "3", "4", "5", "6"]


@pytest.mark.parametrize("heading", ["第一步：確認", "第 2 步", "步驟三：送出", "Step 4: Submit", "**Step 10**"])
def test_step_headings(heading: str) -> None:
    assert is_step_heading(heading)


@pytest.mark.parametrize("heading", ["仍然找不到：申請時數補登", "Steps", "重設密碼步驟", "Next steps"])
def test_other_headings(heading: str) -> None:
    assert not is_step_heading(heading)


def test_a_step_a_merged_chunk_holds_is_found_by_its_heading_line() -> None:
    # the English article's second chunk holds steps 2 and 3 and the section after them
    steps = step_sections(demo_chunks("en-hours-missing.md"))
    assert [step.label for step in steps] == EN_LABELS
    assert steps[1].chunk is steps[2].chunk
