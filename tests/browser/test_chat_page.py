"""The chat page as a person uses it: asking over WebSocket and SSE, stopping, leaving, feedback, reconnecting,
errors, a phone, safety."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import server_query

pytestmark = pytest.mark.browser

ANSWER_TIMEOUT_MS = 30_000
QUESTION = "How do I reset my password?"
# The chat backend's SSE endpoint, the page's default backend.
STREAM_CHAT = "**/api/v1/rag/ask/stream_chat"


def ask(page: Any, question: str, *, transport: str = "ws") -> Any:
    """Type a question and send it with Enter; returns the locator of its answer."""
    if transport != "ws":
        page.click("#settings summary")
        page.select_option("#transport", transport)
        page.keyboard.press("Escape")
    page.fill("#question", question)
    page.press("#question", "Enter")
    return page.locator("li.message.assistant").last


def wait_answered(answer: Any) -> None:
    answer.locator(".sources:not([hidden])").wait_for(timeout=ANSWER_TIMEOUT_MS)


def request_id_of(page: Any) -> str:
    """The request id of the answer being streamed, from the first event the page received."""
    page.locator("html[data-events-seen]").wait_for(state="attached", timeout=ANSWER_TIMEOUT_MS)
    return page.evaluate("window.__seqs[0][0]")


def client_cookie(page: Any) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies() if c["name"] == "hc_client"}


def seqs_of(page: Any) -> list[int]:
    pairs = page.evaluate("window.__seqs")
    request_ids = {request_id for request_id, _seq in pairs}
    assert len(request_ids) == 1, f"events of several requests: {request_ids}"
    return [seq for _request_id, seq in pairs]


def test_ask_over_websocket_streams_markdown_stages_and_sources(page: Any, slow_answers: Any) -> None:
    answer = ask(page, QUESTION)
    # Streaming: the stage timeline (folded: one line naming the current stage) and the answer fill in.
    answer.locator(".stage").first.wait_for(state="attached")
    answer.locator(".answer p").first.wait_for()
    assert answer.locator(".answer").get_attribute("aria-busy") == "true"
    wait_answered(answer)
    answer.locator(".timeline summary").click()
    assert answer.locator(".stage.done").first.is_visible()

    assert page.evaluate("window.__sockets.length") == 1
    assert "reset it yourself online" in answer.locator(".answer").inner_text()
    assert answer.locator(".answer").get_attribute("aria-busy") == "false"
    assert answer.locator(".stage").count() >= 5
    source = answer.locator(".source-list a.source-title").first
    assert source.inner_text() == "How do I reset my password"
    assert source.get_attribute("href") == "https://learnhub.example.gov.tw/help/en/password-reset"
    assert source.get_attribute("rel") == "noopener noreferrer"
    # Citations link to the numbered source, which takes the focus.
    answer.locator(".md-cite a").first.click()
    assert page.evaluate("document.activeElement.id").endswith("-source-1")
    seqs = seqs_of(page)
    assert seqs == list(range(1, len(seqs) + 1))
    # The conversation is listed, marked as the current one.
    page.locator(".conversation[aria-current='true']").wait_for()


def test_ask_over_sse_with_a_form_download(page: Any) -> None:
    answer = ask(page, "I want to download the learning hours correction form", transport="sse")
    wait_answered(answer)
    assert page.evaluate("window.__sockets.length") == 0
    download = answer.locator(".download-link").first
    assert download.get_attribute("href").endswith("/forms/hours-correction-request.pdf")
    seqs = seqs_of(page)
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize("transport", ["ws", "sse"])
def test_stop_cancels_the_answer_mid_way(page: Any, slow_answers: Any, transport: str) -> None:
    answer = ask(page, QUESTION, transport=transport)
    answer.locator(".answer p").first.wait_for()
    page.click("#stop")
    answer.locator(".error-box:not([hidden])").wait_for(timeout=5_000)
    assert "Answer stopped" in answer.locator(".error-box").inner_text()
    assert answer.locator(".sources").is_hidden()
    assert page.locator("#send").is_visible() and page.locator("#stop").is_hidden()
    # The page is ready for the next question, with the focus back in the question box.
    assert page.evaluate("document.activeElement.id") == "question"


@pytest.mark.parametrize("transport", ["ws", "sse"])
def test_a_cut_connection_resumes_and_the_answer_completes(page: Any, slow_answers: Any, transport: str) -> None:
    answer = ask(page, QUESTION, transport=transport)
    answer.locator(".answer p").first.wait_for()
    page.evaluate("window.__cutStreams()")
    wait_answered(answer)

    assert answer.locator(".error-box").is_hidden()
    text = answer.locator(".answer").inner_text()
    assert text.count("reset it yourself online") == 1
    assert 'subject "LearnHub Taiwan password reset"' in text
    # Every event arrived once, across both connections.
    seqs = seqs_of(page)
    assert sorted(seqs) == list(range(1, max(seqs) + 1)) and len(seqs) == len(set(seqs))
    if transport == "ws":
        assert page.evaluate("window.__sockets.length") == 2


def resumed_events(chat_server: str, request_id: str, cookies: dict[str, str]) -> list[dict[str, Any]]:
    """Every event of an answer, replayed by the server from the start, live until its terminal event."""
    url = f"{chat_server}/api/v1/rag/ask/stream/{request_id}"
    events = []
    with httpx.stream("GET", url, params={"last_event_id": "0"}, cookies=cookies, timeout=10) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
    return events


@pytest.mark.parametrize(("transport", "leave"), [("ws", "close"), ("sse", "close"), ("ws", "navigate")])
def test_leaving_the_page_cancels_the_answer(
    page: Any, slow_answers: Any, chat_server: str, transport: str, leave: str
) -> None:
    # The page asks with on_disconnect "continue" (so a dropped connection can resume); a person who closes the
    # tab or goes elsewhere will never come back for the answer, so it must stop and free its LLM slot.
    answer = ask(page, QUESTION, transport=transport)
    answer.locator(".answer p").first.wait_for()
    request_id, cookies = request_id_of(page), client_cookie(page)
    left = time.monotonic()
    if leave == "close":
        page.close(run_before_unload=True)
    else:
        page.goto("about:blank")
    events = resumed_events(chat_server, request_id, cookies)
    ended_after = time.monotonic() - left

    terminal = events[-1]
    assert (terminal["channel"], terminal.get("code")) == ("error", "cancelled"), terminal
    assert ended_after < 2.0, f"the answer ended {ended_after:.1f} s after the page was left"
    assert not any(event["channel"] == "meta_summary" for event in events)


NOTICE_WATCH = """(notice) => {
  window.__noticesShown = [];
  const seen = () => {
    if (notice.hidden || !notice.textContent) return;
    window.__noticesShown.push(notice.textContent);
    document.documentElement.dataset.noticeShown = "1";  // for a locator: the page's CSP forbids eval waits
  };
  new MutationObserver(seen).observe(notice, { attributes: true, childList: true, characterData: true, subtree: true });
}"""


def test_offline_and_back_resumes_over_websocket(page: Any, slow_answers: Any) -> None:
    answer = ask(page, QUESTION)
    answer.locator(".answer p").first.wait_for()
    # The "reconnecting" notice may show only briefly (offline emulation does not always stop a loopback socket
    # from reconnecting), so record that it was shown instead of polling for it.
    page.evaluate(NOTICE_WATCH, answer.locator(".notice").element_handle())
    # Cut first, then go offline: offline emulation does not close a loopback socket by itself, and once it is on
    # it can hold back the closing handshake of a socket closed afterwards, so its close event (which starts the
    # reconnecting) would come only when the browser gives up on the handshake.
    page.evaluate("window.__cutStreams()")
    page.locator("html[data-notice-shown]").wait_for(state="attached", timeout=ANSWER_TIMEOUT_MS)
    assert "reconnecting" in page.evaluate("window.__noticesShown[0]").lower()
    page.context.set_offline(True)
    # A fixed wait, kept: an outage of some length is what is tested, and nothing on the page marks its middle.
    page.wait_for_timeout(700)
    page.context.set_offline(False)
    wait_answered(answer)
    seqs = seqs_of(page)
    assert sorted(seqs) == list(range(1, max(seqs) + 1)) and len(seqs) == len(set(seqs))


STORED_FEEDBACK = """
from chatbot.models import Feedback
result = list(Feedback.objects.filter(request_id={request_id!r}).values("kind", "score", "comment", "client_id"))
"""


def test_feedback_thumbs_and_a_comment_are_stored(page: Any, chat_server_env: dict[str, str]) -> None:
    answer = ask(page, QUESTION)
    wait_answered(answer)
    request_id = request_id_of(page)
    answer.locator(".thumb-up").click()
    answer.locator(".feedback-status", has_text="Thank you").wait_for()
    assert answer.locator(".thumb-up").get_attribute("aria-pressed") == "true"
    # Changing one's mind: thumbs down with a comment replaces the first verdict.
    answer.locator(".thumb-down").click()
    assert answer.locator(".thumb-down").get_attribute("aria-pressed") == "true"
    assert answer.locator(".thumb-up").get_attribute("aria-pressed") == "false"
    answer.locator(".feedback-status", has_text="Thank you").wait_for()
    answer.locator(".feedback-form textarea").fill("The steps skip the e-mail check")
    answer.locator(".feedback-form button").click()
    answer.locator(".feedback-status", has_text="Comment received").wait_for()

    stored = server_query(chat_server_env, STORED_FEEDBACK.format(request_id=request_id))
    client_id = "anon:" + client_cookie(page)["hc_client"]
    assert stored == [
        {"kind": "thumbs", "score": 0, "comment": "The steps skip the e-mail check", "client_id": client_id}
    ]


def test_html_in_a_document_is_shown_as_text_and_never_runs(page: Any) -> None:
    answer = ask(page, "What does the zebra quartz notice say?")
    wait_answered(answer)
    text = answer.locator(".answer").inner_text()
    assert "<script>window.hcPwned=1</script>" in text
    assert '<img src=x onerror="window.hcPwned=2">' in text
    assert page.evaluate("typeof window.hcPwned") == "undefined"
    assert answer.locator(".answer script, .answer img, .sources img").count() == 0
    # A javascript: URL is never a link, in the answer or in the sources.
    hrefs = answer.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert hrefs and not any(href.lower().startswith("javascript") for href in hrefs)
    assert "<img" in answer.locator(".source-list").inner_text()


def test_keyboard_only(page: Any) -> None:
    page.keyboard.press("Tab")  # the skip link comes first
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.type(QUESTION)
    page.keyboard.press("Enter")
    wait_answered(page.locator("li.message.assistant").last)
    page.locator("#new-conversation").focus()
    page.keyboard.press("Enter")
    assert page.locator("#welcome").is_visible()
    assert page.evaluate("document.activeElement.id") == "question"


def test_language_switch_and_history(page: Any) -> None:
    answer = ask(page, QUESTION)
    wait_answered(answer)
    page.click(".lang-switch button[data-lang='zh-hant']")
    assert page.locator("html").get_attribute("lang") == "zh-Hant"
    assert page.locator("#send .visually-hidden").inner_text() == "送出"
    page.click("#new-conversation")
    page.locator(".conversation").first.click()
    page.locator("li.message.assistant .source-list").first.wait_for()
    assert page.evaluate("document.activeElement.id") == "messages-title"
    assert page.locator("li.message.user").first.inner_text().endswith(QUESTION)


BUSY_BODY = {
    "error": {
        "code": "busy",
        "message": "too many questions; try again in 2 s",
        "retry_after": 2,
        "request_id": "busybusy0001",
    }
}


def test_busy_shows_a_countdown_from_retry_after_then_the_retry_answers(page: Any) -> None:
    # The server's refusal when it is full (429 + Retry-After, the JSON error body of the SSE endpoint) for the
    # first question; the retry goes through to the real server.
    asked: list[str] = []

    def refuse_first(route: Any) -> None:
        asked.append(route.request.method)
        if len(asked) > 1:
            route.fallback()
            return
        headers = {"Content-Type": "application/json", "Retry-After": "2", "X-Request-Id": "busybusy0001"}
        route.fulfill(status=429, headers=headers, body=json.dumps(BUSY_BODY))

    page.route(STREAM_CHAT, refuse_first)
    answer = ask(page, QUESTION, transport="sse")
    error, retry, countdown = (answer.locator(s) for s in (".error-box", ".retry-button", ".countdown"))
    error.wait_for(timeout=5_000)
    refused = time.monotonic()
    assert "The service is busy right now." in error.inner_text()
    assert retry.is_disabled()
    # The countdown starts from Retry-After and counts down each second; then the retry button comes back.
    countdown.filter(has_text="You can retry in 2 s").wait_for(timeout=1_000)
    countdown.filter(has_text="You can retry in 1 s").wait_for(timeout=2_500)
    assert retry.is_disabled()
    # A locator, not wait_for_function: waiting on a JS expression is eval, which the page's CSP forbids.
    answer.locator(".retry-button:enabled").wait_for(timeout=2_500)
    assert time.monotonic() - refused >= 1.5, "the retry came back before Retry-After had passed"
    assert countdown.count() == 0
    retry.click()
    retried = page.locator("li.message.assistant").last
    wait_answered(retried)
    assert asked == ["POST", "POST"]
    assert "reset it yourself online" in retried.locator(".answer").inner_text()


REASONING = ["The question is about a forgotten password. ", "The reset article answers it."]


def sse_body(request_id: str, events: list[dict[str, Any]]) -> str:
    frames = []
    for seq, event in enumerate(events, start=1):
        event = {"source": "ask_stream", "request_id": request_id, "seq": seq, **event}
        frames.append(f"id: {seq}\ndata: {json.dumps(event)}\n\n")
    return "".join(frames)


def test_the_reasoning_channel_is_folded_away(page: Any) -> None:
    request_id = "reasoning0001"
    events: list[dict[str, Any]] = [
        {"node": "response_synth", "channel": "status", "stage": "start"},
        *({"node": "response_synth", "channel": "reasoning", "stage": "delta", "delta": d} for d in REASONING),
        {"node": "response_synth", "channel": "answer", "stage": "delta", "delta": "Use **Forgot password** [1]."},
        {"node": "response_synth", "channel": "status", "stage": "end", "ms": 12},
        {
            "node": "END",
            "channel": "meta_summary",
            "stage": "end",
            "elapsed_ms": 40,
            "sources": [{"ref": 1, "title": "Reset", "url": "https://learnhub.example.gov.tw/help/en/password-reset"}],
            "attachments": [],
        },
    ]
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "X-Request-Id": request_id}
    page.route(STREAM_CHAT, lambda route: route.fulfill(status=200, headers=headers, body=sse_body(request_id, events)))
    answer = ask(page, QUESTION, transport="sse")
    wait_answered(answer)

    reasoning = answer.locator("details.reasoning")
    assert reasoning.is_visible()
    assert reasoning.evaluate("details => details.open") is False  # folded: only its summary shows
    assert reasoning.locator("summary").inner_text() == "Reasoning"
    assert reasoning.locator(".reasoning-text").text_content() == "".join(REASONING)
    assert reasoning.locator(".reasoning-text").is_hidden()
    assert "forgotten password" not in answer.locator(".answer").inner_text()
    reasoning.locator("summary").click()
    assert reasoning.locator(".reasoning-text").is_visible()


def no_horizontal_overflow(page: Any) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def in_viewport(page: Any, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    return (
        box is not None
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= size["width"]
        and (box["y"] + box["height"] <= size["height"])
    )


@pytest.fixture
def phone(chromium: Any, chat_server: str) -> Any:
    context = chromium.new_context(viewport={"width": 390, "height": 844}, locale="en-US", has_touch=True)
    page = context.new_page()
    page.goto(chat_server + "/")
    page.wait_for_selector("#suggestions button")
    yield page
    context.close()


def test_on_a_phone_nothing_overflows_the_drawer_opens_and_closes_and_the_input_stays(phone: Any) -> None:
    page = phone
    assert no_horizontal_overflow(page)
    assert in_viewport(page, "#question") and in_viewport(page, "#send")
    assert page.locator("#history").is_hidden()  # the conversations are a drawer, closed

    toggle = page.locator("#history-toggle")
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true"
    page.locator("#history").wait_for(state="visible")
    assert page.evaluate("document.activeElement.id") == "new-conversation"
    page.keyboard.press("Escape")
    assert toggle.get_attribute("aria-expanded") == "false"
    page.locator("#history").wait_for(state="hidden")
    assert page.evaluate("document.activeElement.id") == "history-toggle"
    # The backdrop beside the open drawer closes it too.
    toggle.click()
    page.locator("#history").wait_for(state="visible")
    page.mouse.click(380, 600)
    page.locator("#history").wait_for(state="hidden")

    answer = ask(page, "I want to download the learning hours correction form")
    wait_answered(answer)
    assert no_horizontal_overflow(page)
    assert in_viewport(page, "#question") and in_viewport(page, "#send")


SCREENSHOTS = [
    ("en", 1280, 800, "light"),
    ("zh-hant", 1280, 800, "light"),
    ("en", 390, 844, "light"),
    ("zh-hant", 390, 844, "light"),
    ("en", 1280, 800, "dark"),
    ("zh-hant", 390, 844, "dark"),
]


@pytest.mark.parametrize(("language", "width", "height", "scheme"), SCREENSHOTS)
def test_screenshots(
    chromium: Any, chat_server: str, screenshot_dir: Path, language: str, width: int, height: int, scheme: str
) -> None:
    context = chromium.new_context(
        viewport={"width": width, "height": height},
        locale="zh-TW" if language == "zh-hant" else "en-US",
        device_scale_factor=2 if width < 600 else 1,
        color_scheme=scheme,
    )
    page = context.new_page()
    page.goto(chat_server + "/")
    question = "如何重設密碼？" if language == "zh-hant" else QUESTION
    page.fill("#question", question)
    page.press("#question", "Enter")
    answer = page.locator("li.message.assistant").last
    wait_answered(answer)
    # The first source's preview is open: the passage the answer was built from.
    answer.locator(".source-preview summary").first.click()
    answer.locator(".source-snippet").first.wait_for()
    page.locator("#question").blur()
    page.evaluate("document.getElementById('scroller').scrollTop = 1e6")
    device = "desktop" if width >= 600 else "phone"
    suffix = "-dark" if scheme == "dark" else ""
    path = screenshot_dir / f"chat-{device}-{language}{suffix}.png"
    page.screenshot(path=str(path))
    context.close()
    assert path.stat().st_size > 0


MARKDOWN = """# Steps

Select **Log in**, then *Forgot password* and `Send reset link` [1].
Line two of the paragraph, see https://learnhub.example.gov.tw/help.

1. First
2. Second with [a link](https://example.org/a_(b)) and [bad](javascript:alert(1)) and [data](data:text/html,x)
   - nested item
- other list

> quoted <b>bold?</b>

```html
<script>window.__pwned = "code"</script>
```

snake_case_name and a__b__c stay; <img src=x onerror="window.__pwned='img'">
"""


def test_the_markdown_renderer_builds_elements_and_never_markup(page: Any) -> None:
    structure = page.evaluate(
        """(text) => {
            const box = document.createElement("div");
            document.body.append(box);
            window.HelpMarkdown.render(box, text, { citeHref: (n) => "#source-" + n });
            const tags = (selector) => [...box.querySelectorAll(selector)].map((node) => node.textContent);
            return {
                h: tags("h3"), strong: tags("strong"), em: tags("em"), code: tags("code"), ol: tags("ol > li").length,
                nested: tags("ol ul li"), quote: tags("blockquote"), cite: tags("sup a"),
                br: box.querySelectorAll("br").length,
                links: [...box.querySelectorAll("a")].map((a) => [a.textContent, a.getAttribute("href"), a.rel]),
                raw: box.querySelectorAll("script, img, b").length, text: box.textContent,
            };
        }""",
        MARKDOWN,
    )
    assert structure["h"] == ["Steps"]
    assert structure["strong"] == ["Log in"] and structure["em"] == ["Forgot password"]
    assert "Send reset link" in structure["code"] and '<script>window.__pwned = "code"</script>' in structure["code"]
    assert structure["ol"] == 2 and structure["nested"] == ["nested item"]
    assert structure["quote"] == ["quoted <b>bold?</b>"]
    assert structure["cite"] == ["[1]"] and structure["br"] >= 1
    links = {text: (href, rel) for text, href, rel in structure["links"]}
    assert links["a link"] == ("https://example.org/a_(b)", "noopener noreferrer")
    assert links["https://learnhub.example.gov.tw/help"][0] == "https://learnhub.example.gov.tw/help"
    assert "bad" not in links and "data" not in links  # the words stay, as text
    assert structure["raw"] == 0
    assert "snake_case_name and a__b__c stay" in structure["text"]
    assert page.evaluate("typeof window.__pwned") == "undefined"
