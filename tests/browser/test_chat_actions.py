"""What a person does with answers and conversations on the chat page: copy, regenerate, read a source's passage,
rename and delete conversations; and what the page remembers: dark mode from the browser, the chosen transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import server_query
from tests.browser.test_chat_page import QUESTION, STREAM_CHAT, ask, client_cookie, sse_body, wait_answered

pytestmark = pytest.mark.browser

ZH_QUESTION = "如何重設密碼？"


def new_page(chromium: Any, url: str, *, phone: bool = False, language: str = "en", scheme: str = "light") -> Any:
    context = chromium.new_context(
        viewport={"width": 390, "height": 844} if phone else {"width": 1280, "height": 800},
        locale="zh-TW" if language == "zh-hant" else "en-US",
        has_touch=phone,
        color_scheme=scheme,
    )
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(url + "/")
    page.wait_for_selector("#suggestions button")
    return page


@pytest.fixture(params=[("desktop", "en"), ("phone", "zh-hant")], ids=["desktop-en", "phone-zh-hant"])
def any_page(request: pytest.FixtureRequest, chromium: Any, chat_server: str) -> Iterator[Any]:
    device, language = request.param
    page = new_page(chromium, chat_server, phone=device == "phone", language=language)
    page.language = language
    page.phone = device == "phone"
    yield page
    page.context.close()
    assert not page.errors, f"script errors on the page: {page.errors}"


def question_for(page: Any) -> str:
    return ZH_QUESTION if page.language == "zh-hant" else QUESTION


def test_copy_puts_the_answer_and_its_sources_on_the_clipboard(any_page: Any, chat_server: str) -> None:
    page = any_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat_server)
    answer = ask(page, question_for(page))
    wait_answered(answer)
    copy = answer.locator(".copy-button")
    copy.click()
    copy.filter(has_text="Copied" if page.language == "en" else "已複製").wait_for()
    copied = page.evaluate("navigator.clipboard.readText()")
    shown = answer.locator(".answer").inner_text()
    # The answer as written (its first words as shown) with the numbered sources the citations point to.
    assert copied.startswith(shown.split("\n")[0][:10])
    first_source = answer.locator(".source-list .source-title").first.inner_text()
    assert f"[1] {first_source}" in copied
    assert "https://learnhub.example.gov.tw/help/" in copied


def test_regenerate_asks_the_same_question_again_in_the_conversation(
    any_page: Any, chat_server_env: dict[str, str]
) -> None:
    page = any_page
    question = question_for(page)
    first = ask(page, question)
    wait_answered(first)
    first.locator(".regenerate-button").click()
    second = page.locator("li.message.assistant").nth(1)
    wait_answered(second)
    assert page.locator("li.message.user .user-text").all_inner_texts() == [question, question]
    conversation_id = page.evaluate(
        "document.querySelector('.conversation[aria-current=true]').closest('li').dataset.id"
    )
    stored = server_query(
        chat_server_env,
        "from chatbot.models import Message\n"
        f"result = list(Message.objects.filter(conversation_id={conversation_id!r}, role='user')"
        ".values_list('content', flat=True))",
    )
    assert stored == [question, question]


def test_a_source_shows_the_passage_the_answer_cites(any_page: Any) -> None:
    page = any_page
    answer = ask(page, question_for(page))
    wait_answered(answer)
    source = answer.locator(".source-list .source").first
    snippet = source.locator(".source-snippet")
    assert snippet.is_hidden()  # folded until asked for
    source.locator(".source-preview summary").click()
    assert snippet.is_visible()
    words = "password" if page.language == "en" else "密碼"
    assert words in snippet.inner_text().lower()
    # A citation in the answer opens its source's passage too.
    source.locator(".source-preview summary").click()
    assert snippet.is_hidden()
    answer.locator(".md-cite a").first.click()
    assert snippet.is_visible()


def open_drawer_if_phone(page: Any) -> None:
    if page.phone and page.locator("#history").is_hidden():
        page.click("#history-toggle")
        page.locator("#history").wait_for(state="visible")


def test_rename_and_delete_a_conversation(any_page: Any, chat_server_env: dict[str, str]) -> None:
    page = any_page
    wait_answered(ask(page, question_for(page)))
    open_drawer_if_phone(page)
    item = page.locator(".conversation-item").first
    item.locator(".conversation[aria-current='true']").wait_for()
    conversation_id = item.get_attribute("data-id")

    item.locator(".rename-conversation").click()
    page.locator(".rename-input").fill("My password question")
    page.keyboard.press("Enter")
    page.locator(".conversation-title", has_text="My password question").wait_for()
    # Escape leaves a rename without saving it.
    page.locator(".conversation-item").first.locator(".rename-conversation").click()
    page.locator(".rename-input").fill("Not this")
    page.keyboard.press("Escape")
    page.locator(".conversation-title", has_text="My password question").wait_for()
    page.reload()
    open_drawer_if_phone(page)
    page.locator(".conversation-title", has_text="My password question").wait_for()

    dialogs: list[str] = []

    def accept(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.locator(".conversation-item").first.locator(".delete-conversation").click()
    page.locator(".conversation-list .muted").wait_for()
    assert "My password question" in dialogs[0]
    assert page.locator(".conversation-item").count() == 0
    # hidden from the visitor, kept for staff until the retention purge (CONVERSATION_RETENTION_DAYS)
    kept_hidden = server_query(
        chat_server_env,
        "from chatbot.models import Conversation\n"
        f"result = Conversation.objects.filter(pk={conversation_id!r}, hidden_at__isnull=False).exists()",
    )
    assert kept_hidden is True


def test_a_dismissed_delete_keeps_the_conversation(page: Any) -> None:
    wait_answered(ask(page, QUESTION))
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator(".conversation-item").first.locator(".delete-conversation").click()
    page.wait_for_timeout(300)  # nothing should happen; give a wrong request the time to land
    page.reload()
    page.locator(".conversation-item").first.wait_for()
    assert client_cookie(page)


def background_luminance(page: Any, selector: str) -> float:
    rgb = page.eval_on_selector(
        selector, "e => getComputedStyle(e).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number)"
    )
    return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255


@pytest.mark.parametrize(("phone", "language"), [(False, "en"), (True, "zh-hant")], ids=["desktop-en", "phone-zh-hant"])
def test_the_page_follows_the_browsers_dark_preference(
    chromium: Any, chat_server: str, phone: bool, language: str
) -> None:
    dark = new_page(chromium, chat_server, phone=phone, language=language, scheme="dark")
    light = new_page(chromium, chat_server, phone=phone, language=language, scheme="light")
    try:
        for selector in ("html", ".topbar", ".composer-box", ".suggestion"):
            assert background_luminance(dark, selector) < 0.2, selector
            assert background_luminance(light, selector) > 0.8, selector
        answer = ask(dark, ZH_QUESTION if language == "zh-hant" else QUESTION)
        wait_answered(answer)
        # Text stays readable: light words on the dark answer bubble.
        color = answer.locator(".answer").evaluate("e => getComputedStyle(e).color.match(/\\d+/g).map(Number)")
        assert sum(color[:3]) / 3 > 180
        assert dark.evaluate("getComputedStyle(document.documentElement).colorScheme") == "dark"
    finally:
        dark.context.close()
        light.context.close()
    assert not dark.errors and not light.errors


def test_the_transport_and_model_api_are_kept_across_a_reload(any_page: Any) -> None:
    page = any_page
    page.click("#settings summary")
    page.select_option("#transport", "sse")
    page.select_option("#backend", "responses")
    page.reload()
    page.wait_for_selector("#suggestions button")
    assert page.locator("#transport").input_value() == "sse"
    assert page.locator("#backend").input_value() == "responses"
    # And they are what the next question uses: SSE to the Responses endpoint, no WebSocket.
    sockets: list[Any] = []
    page.on("websocket", lambda socket: sockets.append(socket))
    with page.expect_request("**/api/v1/rag/ask/stream") as asked:
        page.fill("#question", question_for(page))
        page.press("#question", "Enter")
    assert asked.value.method == "POST"
    wait_answered(page.locator("li.message.assistant").last)
    assert sockets == []


def test_a_source_without_a_url_can_still_be_read(page: Any) -> None:
    # A document with no web page (an internal notice): its title cannot link anywhere, its passage still shows.
    request_id = "nourl0001"
    events: list[dict[str, Any]] = [
        {"node": "response_synth", "channel": "answer", "stage": "delta", "delta": "The library opens at 9 [1]."},
        {
            "node": "END",
            "channel": "meta_summary",
            "stage": "end",
            "elapsed_ms": 40,
            "sources": [
                {"ref": 1, "title": "Library opening hours", "url": "", "snippet": "Open 9:00 to 17:00 on weekdays."}
            ],
            "attachments": [],
        },
    ]
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "X-Request-Id": request_id}
    page.route(STREAM_CHAT, lambda route: route.fulfill(status=200, headers=headers, body=sse_body(request_id, events)))
    answer = ask(page, "When does the library open?", transport="sse")
    wait_answered(answer)
    source = answer.locator(".source-list .source").first
    assert source.locator("a").count() == 0 and source.locator(".source-title").inner_text() == "Library opening hours"
    answer.locator(".md-cite a").first.click()
    assert source.locator(".source-snippet").inner_text() == "Open 9:00 to 17:00 on weekdays."
    assert source.locator(".source-snippet").is_visible()
