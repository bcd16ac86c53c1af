"""The browser half of `scripts/openwebui_e2e.py`: Open WebUI 0.12.x driven in Chromium as a person would."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

ANSWER_TIMEOUT_MS = 120_000
QUESTIONS = ("如何重設密碼？", "How do I reset my password?")
FOLLOW_UP = "How long is the reset link valid?"
FORM_QUESTION = "請問要下載哪一份申請表？"


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _open(page: Page, url: str) -> None:
    """A new chat; the "What's New" notes Open WebUI shows on a first visit are closed as a person would."""
    page.goto(url)
    page.wait_for_selector("#chat-input")
    page.wait_for_timeout(1500)
    notes = page.get_by_text("Okay, Let's Go!")
    if notes.count() and notes.first.is_visible():
        notes.first.click()
        page.wait_for_timeout(500)


def _ask(page: Page, text: str) -> str:
    """Type a message, send it, wait until the answer stops streaming; the last answer's text."""
    before = page.locator("#response-content-container").count()
    box = page.locator("#chat-input")
    box.click()
    page.keyboard.insert_text(text)
    page.keyboard.press("Enter")
    return _wait_answer(page, before)


def _wait_answer(page: Page, before: int) -> str:
    answers = page.locator("#response-content-container")
    page.wait_for_function(f"document.querySelectorAll('#response-content-container').length > {before}")
    deadline = time.monotonic() + ANSWER_TIMEOUT_MS / 1000
    last, stable = "", 0
    while time.monotonic() < deadline:  # done when the text has not changed for 2 s and the stop button is gone
        text = answers.last.inner_text()
        stable = stable + 1 if text == last and text.strip() else 0
        last = text
        if stable >= 4 and page.locator("button[aria-label='Stop']").count() == 0:
            return text
        page.wait_for_timeout(500)
    return last


def _sources_chip(page: Page) -> str:
    chips = page.get_by_text(re.compile(r"^\s*\d+\s+Sources?\s*$"))
    return chips.last.inner_text() if chips.count() else ""


def _shot(page: Page, folder: Path, name: str, shots: list[str]) -> None:
    path = folder / f"openwebui-{name}.png"
    page.screenshot(path=str(path), full_page=False)
    shots.append(str(path))


def _title(page: Page) -> str:
    """The chat's title, as Open WebUI shows it in the tab ("<title> / Open WebUI") and above the chat."""
    page.wait_for_timeout(3000)
    return re.split(r" [•/] ", page.title())[0].strip()


def _more_concise(page: Page) -> str:
    before = page.locator("#response-content-container").count()
    page.locator("#response-content-container").last.hover()
    page.locator("button[aria-label='Regenerate'], button.regenerate-response-button").last.click()
    page.get_by_text("More Concise", exact=True).last.click()
    page.wait_for_timeout(1000)
    # the regenerated answer replaces the last one in place (a sibling): wait for its text to settle
    return _wait_answer(page, before - 1)


def drive(url: str, screenshots: Path, chromium: str, chromium_args: list[str]) -> dict[str, Any]:
    screenshots.mkdir(parents=True, exist_ok=True)
    shots: list[str] = []
    seen: dict[str, Any] = {}
    checks: dict[str, bool] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=chromium_args)
        page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
        page.set_default_timeout(60_000)
        _open(page, url)
        _shot(page, screenshots, "0-new-chat", shots)
        for number, question in enumerate(QUESTIONS, start=1):
            if number > 1:
                _open(page, url)
            answer = _ask(page, question)
            page.wait_for_timeout(1500)
            chip = _sources_chip(page)
            seen[question] = {"answer": answer[:300], "sources_chip": chip}
            checks[f"answered with sources: {question}"] = bool(answer.strip()) and bool(chip)
            _shot(page, screenshots, f"{number}-answer", shots)
        follow = _ask(page, FOLLOW_UP)
        seen["follow_up"] = follow[:300]
        checks["follow-up answered"] = "30" in follow  # the reset link is valid for 30 minutes
        title = _title(page)
        seen["title"] = title
        checks["short title"] = 0 < len(title) <= 40 and title.lower() != QUESTIONS[1].lower()
        _shot(page, screenshots, "3-follow-up-and-title", shots)
        try:
            shorter = _more_concise(page)
            seen["more_concise"] = shorter[:300]
            # shorter, and still saying what the follow-up asked (how long the link is valid)
            checks["More Concise shortens"] = 0 < len(shorter) < len(follow) and "30" in shorter
        except Exception as exc:  # a menu that moved: reported, not hidden
            seen["more_concise_error"] = repr(exc)
            checks["More Concise shortens"] = False
        _shot(page, screenshots, "4-more-concise", shots)
        _open(page, url)
        _ask(page, FORM_QUESTION)
        _shot(page, screenshots, "5-form-answer", shots)
        link = page.locator("#response-content-container a[href*='/forms/']").first
        href = link.get_attribute("href") if link.count() else ""
        seen["form_link"] = href
        if href:
            with page.context.expect_page() as opened:
                link.click()
            seen["form_link_opened"] = opened.value.url  # Chromium headless downloads a PDF and closes the tab
            response = page.request.get(href)
            checks["form link opens the PDF"] = response.ok and response.body().startswith(b"%PDF")
        else:
            checks["form link opens the PDF"] = False
        browser.close()
    return {"seen": seen, "checks": checks, "screenshots": shots}


if __name__ == "__main__":  # against an Open WebUI already running: python -m scripts.openwebui_drive URL
    import json
    import sys

    from scripts.openwebui_e2e import CHROMIUM_ARGS, PROJECT

    report = drive(sys.argv[1], PROJECT / "docs/screenshots", "/usr/bin/chromium", CHROMIUM_ARGS)
    print(json.dumps(report, ensure_ascii=False, indent=2))
