"""The embeddable widget in real Chromium: a plain page on another origin (another port) holding only the script
tag, against the test server; and the same page on an origin the site does not allow.

With UPDATE_SCREENSHOTS=1 the screenshots (widget-*.png) go to docs/screenshots/.
"""

from __future__ import annotations

import functools
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, MANAGE, ROOT, server_query

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>* {{ font-family: serif !important; color: #a00; }} button {{ font-size: 40px; }}</style></head>
<body><h1>{title}</h1><p><a href="{other}">Go to the {other_name}</a></p>
<script src="{server}/widget.js" data-site="{key}" async></script></body></html>
"""
ANSWER_WAIT = 30_000


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def host_pages(
    tmp_path_factory: pytest.TempPathFactory, chat_server: str, chat_server_env: dict[str, str]
) -> Iterator[Any]:
    """Two ports serving the same two pages: the first port's origin is an allowed site's, the second's is not."""
    folder = tmp_path_factory.mktemp("host-site")
    servers = [
        ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder))) for _ in range(2)
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    allowed, refused = (f"http://127.0.0.1:{server.server_address[1]}" for server in servers)
    done = subprocess.run(
        [*MANAGE, "sites", "add", "--name", "Host University", "--origin", allowed, "--language", "zh-hant"],
        cwd=ROOT, env=chat_server_env, check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    key = done.stdout.strip().splitlines()[-1]
    for name, other, title in (
        ("index.html", "page2.html", "Library home"),
        ("page2.html", "index.html", "Opening hours"),
    ):
        html = PAGE.format(title=title, other=other, other_name="other page", server=chat_server, key=key)
        (folder / name).write_text(html, encoding="utf-8")
    yield type("Hosts", (), {"allowed": allowed, "refused": refused, "key": key})
    for server in servers:
        server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _open(browser: Any, url: str, **context: Any) -> tuple[Any, Any, list[str], list[str]]:
    ctx = browser.new_context(**{"viewport": {"width": 1280, "height": 800}, "locale": "en-US", **context})
    page = ctx.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(url)
    return ctx, page, errors, requests


def _ask(widget: Any, question: str, answers_before: int) -> Any:
    widget.locator("textarea").fill(question)
    widget.locator("textarea").press("Enter")
    answer = widget.locator(".message.assistant").nth(answers_before)
    answer.locator(".sources").wait_for(timeout=ANSWER_WAIT)
    return answer


def test_the_script_tag_alone_gives_a_launcher_and_cited_answers_that_follow_the_visitor(
    browser: Any, host_pages: Any, chat_server: str, chat_server_env: dict[str, str], screenshot_dir: Path
) -> None:
    ctx, page, errors, requests = _open(browser, host_pages.allowed + "/index.html")
    widget = page.locator("[data-helpcentre-widget]")
    launcher = widget.locator("button.launcher")
    launcher.wait_for()
    assert launcher.get_attribute("aria-expanded") == "false"
    launcher.focus()
    page.keyboard.press("Enter")  # keyboard only
    assert launcher.get_attribute("aria-expanded") == "true" or widget.locator(".panel").is_visible()
    assert widget.locator("textarea").evaluate("node => node.getRootNode().activeElement === node")
    # The host page's rules do not reach into the shadow root.
    assert "serif" not in widget.locator(".title").evaluate("n => getComputedStyle(n).fontFamily").replace(
        "sans-serif", ""
    )
    # In the site's language (zh-hant): a question streamed to a cited answer.
    zh = _ask(widget, "如何重設密碼？", 0)
    assert re.search(r"[\u4e00-\u9fff]", zh.locator(".body").inner_text())
    assert zh.locator(".sources li").count() >= 1
    zh.locator(".sources summary").first.click()  # the passage behind the source
    assert zh.locator(".passage").first.inner_text().strip()
    en = _ask(widget, "How do I reset my password?", 1)
    assert "password" in en.locator(".body").inner_text().lower()
    # The server is the session's: other modules' verdicts are there too, so only rows from now on count.
    last = "from chatbot.models import Feedback\nresult = max(Feedback.objects.values_list('pk', flat=True), default=0)"
    before = server_query(chat_server_env, last)
    en.locator("button.vote.up").click()
    expect(en.locator("button.vote.up")).to_have_attribute("aria-pressed", "true")
    query = (
        "from chatbot.models import Feedback\n"
        f"result = list(Feedback.objects.filter(pk__gt={before}).values_list('kind', 'score', 'message__content'))"
    )
    votes = server_query(chat_server_env, query)
    assert [vote[:2] for vote in votes] == [["thumbs", 1]]
    assert "password" in votes[0][2].lower()  # on the answer voted on
    page.screenshot(path=str(screenshot_dir / "widget-desktop.png"))
    # Another page of the site: the conversation is still there, and goes on.
    page.click("text=Go to the other page")
    page.wait_for_url("**/page2.html")
    widget = page.locator("[data-helpcentre-widget]")
    widget.locator(".message.assistant").nth(1).wait_for()
    assert widget.locator(".message").count() == 4
    assert widget.locator(".panel").is_visible()  # it was open on the previous page
    third = _ask(widget, "那要多久才會收到信？", 2)
    assert third.locator(".body").inner_text().strip()
    # Nothing but the host page and the assistant's server was asked for anything.
    origins = {f"{part.scheme}://{part.netloc}" for part in map(urlsplit, requests) if part.scheme.startswith("http")}
    assert origins <= {host_pages.allowed, chat_server}, origins
    ctx.close()
    assert not errors, errors


def test_an_origin_the_site_does_not_allow_gets_a_clear_refusal_and_no_answer(
    browser: Any, host_pages: Any, screenshot_dir: Path
) -> None:
    ctx, page, errors, _requests = _open(browser, host_pages.refused + "/index.html")
    widget = page.locator("[data-helpcentre-widget]")
    widget.locator("button.launcher").click()
    refusal = widget.locator(".refusal")
    refusal.wait_for()
    assert f"{host_pages.refused} is not allowed" in refusal.inner_text()
    assert widget.locator("textarea").is_disabled()
    assert widget.locator(".message").count() == 0
    page.screenshot(path=str(screenshot_dir / "widget-refused.png"))
    ctx.close()
    assert not errors, errors


def test_on_a_phone_in_dark_mode_the_panel_fills_the_screen(
    browser: Any, host_pages: Any, screenshot_dir: Path
) -> None:
    size = {"width": 390, "height": 760}
    ctx, page, errors, _requests = _open(
        browser, host_pages.allowed + "/index.html", viewport=size, color_scheme="dark", is_mobile=True, has_touch=True
    )
    widget = page.locator("[data-helpcentre-widget]")
    widget.locator("button.launcher").click()
    panel = widget.locator(".panel")
    box = panel.bounding_box()
    assert box is not None and (box["x"], box["y"], box["width"], box["height"]) == (
        0,
        0,
        size["width"],
        size["height"],
    )
    background = panel.evaluate("n => getComputedStyle(n).backgroundColor")
    assert background == "rgb(20, 24, 31)", background  # the dark theme
    _ask(widget, "如何重設密碼？", 0)
    page.screenshot(path=str(screenshot_dir / "widget-phone-dark.png"))
    ctx.close()
    assert not errors, errors


def test_branding_set_reaches_the_widget_the_chat_page_and_an_offline_refusal(
    browser: Any, host_pages: Any, chat_server: str, chat_server_env: dict[str, str], screenshot_dir: Path
) -> None:
    def manage(*args: str) -> None:
        subprocess.run([*MANAGE, *args], cwd=ROOT, env=chat_server_env, check=True, capture_output=True, timeout=60)

    manage(
        "branding", "set", "--name", "Acme Library Helper", "--contact", "phone the Acme desk on 555-0100",
        "--scope", "Acme Library Helper only answers questions about the library; phone the Acme desk on 555-0100.",
        "--suggest", "When is the Acme library open?",
    )  # fmt: skip
    try:
        ctx, page, errors, _requests = _open(browser, host_pages.allowed + "/index.html")
        widget = page.locator("[data-helpcentre-widget]")
        widget.locator("button.launcher").click()
        expect(widget.locator(".title")).to_have_text("Acme Library Helper")
        assert widget.locator(".suggestion").all_inner_texts() == ["When is the Acme library open?"]
        widget.locator("textarea").fill("Tell me a joke")
        widget.locator("textarea").press("Enter")
        widget.locator(".message.assistant .actions").wait_for(timeout=ANSWER_WAIT)
        assert "phone the Acme desk on 555-0100" in widget.locator(".message.assistant .body").inner_text()
        page.screenshot(path=str(screenshot_dir / "widget-branding.png"))
        page.goto(chat_server + "/")
        page.wait_for_selector("#suggestions button")
        assert page.title().startswith("Acme Library Helper")
        assert page.locator("#suggestions button").all_inner_texts() == ["When is the Acme library open?"]
        ctx.close()
        assert not errors, errors
    finally:
        # Back to the demo's words for the other browser tests.
        manage(
            "shell",
            "-c",
            "from rag.branding.services import branding_set, _demo_words; branding_set(values=_demo_words())",
        )
