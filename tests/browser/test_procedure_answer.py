"""In the chat page, a how-to question shows its whole procedure: every step in order, with its conditions, also
when the article writes each step as a section of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_chat_page import ask, wait_answered

pytestmark = pytest.mark.browser


def test_how_to_reset_the_password_shows_every_step_in_order(page: Any, screenshot_dir: Path) -> None:
    answer = ask(page, "如何重設密碼？")
    wait_answered(answer)
    steps = answer.locator(".answer ol > li")
    assert steps.count() == 6
    texts = steps.all_inner_texts()
    assert "右上角「登入」" in texts[0] and "忘記密碼" in texts[1] and "寄送重設連結" in texts[3]
    assert "30 分鐘" in texts[4]  # the link's validity, inside its step
    rules = answer.locator(".answer ul > li").all_inner_texts()
    assert any("長度至少 12 個字元" in rule for rule in rules)  # the password rules under the steps
    assert "如何重設密碼" in answer.locator(".sources").inner_text()
    page.screenshot(path=str(screenshot_dir / "procedure-answer.png"), full_page=True)


def test_a_procedure_written_as_step_sections_shows_every_step(page: Any) -> None:
    answer = ask(page, "上完課但查不到研習時數，要怎麼檢查？")
    wait_answered(answer)
    labels = answer.locator(".answer strong").all_inner_texts()
    assert labels == ["第一步：確認課程是否真的「已完成」", "第二步：查看上傳狀態", "第三步：確認是否使用了另一個帳號"]
    text = answer.locator(".answer").inner_text()
    assert "課後測驗未達 60 分" in text and "3 個工作天內上傳" in text and "合併帳號" in text
    assert "研習時數沒有出現" in answer.locator(".sources").inner_text()
