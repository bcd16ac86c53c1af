"""In the chat page, a how-to question shows its whole procedure: every step in order, with its conditions."""

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
