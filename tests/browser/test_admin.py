"""The admin as staff use it, in the browser's language: English for an English browser, 繁中 for a zh-TW one,
on a desktop and a phone; documents uploaded, then deleted from the index."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import server_query

pytestmark = pytest.mark.browser

USERNAME = "staff-browser"
PASSWORD = "correct-horse-battery-9"
CJK = re.compile(r"[\u4e00-\u9fff]")
JOB_TIMEOUT_MS = 60_000

CREATE_STAFF = f"""
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username={USERNAME!r}).exists():
    User.objects.create_superuser(username={USERNAME!r}, email="", password={PASSWORD!r})
result = True
"""


@pytest.fixture(scope="module")
def staff(chat_server_env: dict[str, str]) -> tuple[str, str]:
    server_query(chat_server_env, CREATE_STAFF)
    return USERNAME, PASSWORD


def admin_page(chromium: Any, url: str, *, language: str, phone: bool) -> Any:
    context = chromium.new_context(
        viewport={"width": 390, "height": 844} if phone else {"width": 1400, "height": 900},
        locale="zh-TW" if language == "zh-hant" else "en-US",
        timezone_id="Asia/Taipei" if language == "zh-hant" else "America/New_York",
        has_touch=phone,
    )
    page = context.new_page()
    page.errors = []
    page.missing = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("response", lambda response: page.missing.append(response.url) if response.status == 404 else None)
    page.set_default_timeout(15_000)
    page.goto(url + "/admin/login/?next=/admin/")
    return page


def log_in(page: Any, staff: tuple[str, str]) -> None:
    page.fill("#id_username", staff[0])
    page.fill("#id_password", staff[1])
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


@pytest.fixture(params=[("en", False), ("zh-hant", True)], ids=["en-desktop", "zh-hant-phone"])
def admin(request: pytest.FixtureRequest, chromium: Any, chat_server: str, staff: tuple[str, str]) -> Iterator[Any]:
    language, phone = request.param
    page = admin_page(chromium, chat_server, language=language, phone=phone)
    page.language = language
    log_in(page, staff)
    yield page
    page.context.close()
    assert not page.errors, f"script errors on the page: {page.errors}"


def test_an_english_browser_gets_an_english_admin(
    chromium: Any, chat_server: str, staff: tuple[str, str], screenshot_dir: Path
) -> None:
    page = admin_page(chromium, chat_server, language="en", phone=False)
    try:
        assert page.locator("label[for=id_username]").inner_text().startswith("Username")
        log_in(page, staff)
        assert page.locator("html").get_attribute("lang") == "en"
        text = page.locator("#content").text_content()
        assert "Site administration" in page.title()
        assert "Documents and index jobs" in text and "LLM concurrency" in text
        assert not CJK.findall(page.locator("body").inner_text()), "Chinese words in the English admin"
        # Times are the viewer's, and say so (the server's default zone is Asia/Taipei).
        assert page.locator(".time-zone").text_content().strip() == "Times in America/New_York."
        page.screenshot(path=str(screenshot_dir / "admin-desktop-en.png"))
        page.goto(chat_server + "/admin/rag_documents/backfilljob/")
        assert not CJK.findall(page.locator("#content").inner_text())
        assert "Select backfill job to view" in page.locator("#content h1").inner_text()
    finally:
        page.context.close()
    assert not page.missing, f"404s: {page.missing}"  # the favicon among them


def test_a_chinese_browser_gets_the_admin_in_traditional_chinese(
    chromium: Any, chat_server: str, staff: tuple[str, str]
) -> None:
    page = admin_page(chromium, chat_server, language="zh-hant", phone=True)
    try:
        assert page.locator("label[for=id_username]").inner_text().startswith("使用者名稱")
        log_in(page, staff)
        assert page.locator("html").get_attribute("lang") == "zh-hant"
        text = page.locator("#content").text_content()
        # Our own words too, not only Django's: the apps' names, and the models' names within them.
        assert "文件與索引工作" in text and "LLM 並行控制" in text
        assert "補寫描述工作" in text and "語意快取項目" in text and "回答評估" in text
        assert "Documents and index jobs" not in text and "Backfill jobs" not in text
        # Django's sentence around our model's name, both in Chinese ("選擇 %s 查看").
        page.goto(chat_server + "/admin/rag_documents/backfilljob/")
        heading = page.locator("#content h1").inner_text()
        assert "補寫描述工作" in heading and "backfill" not in heading.lower()
        assert "開始補寫描述" in page.locator(".object-tools").inner_text()
        # A form of ours: field names, help texts and buttons.
        page.goto(chat_server + "/admin/rag_documents/indexjob/start/")
        form = page.locator("#content-main").inner_text()
        assert "路徑" in form and "重新嵌入每份文件" in form and "Re-embed" not in form
        assert page.locator("#content-main input[type=submit]").get_attribute("value") == "開始"
    finally:
        page.context.close()
    assert not page.missing, f"404s: {page.missing}"


WORD = {"en": "Delete the selected documents", "zh-hant": "刪除選取的文件"}


def test_staff_upload_a_document_then_delete_it_from_the_index(
    admin: Any, chat_server: str, chat_server_env: dict[str, str], tmp_path: Path, screenshot_dir: Path
) -> None:
    page = admin
    term = f"walrus{uuid.uuid4().hex[:8]}"
    upload = tmp_path / f"{term}.md"
    upload.write_text(
        f"---\ntitle: The {term} policy\nlanguage: en\n---\n\n# The {term} policy\n\n"
        f"The {term} policy says walruses may borrow two books at a time.\n",
        encoding="utf-8",
    )
    page.goto(chat_server + "/admin/rag_documents/document/upload/")
    page.set_input_files("#id_files", str(upload))
    page.locator("#content-main input[type=submit]").click()
    page.wait_for_url("**/indexjob/*/change/")
    page.locator("#rag-job[data-finished='1']").wait_for(timeout=JOB_TIMEOUT_MS)
    succeeded = {"en": "succeeded", "zh-hant": "成功"}[page.language]  # the job's state in the page's language
    assert succeeded in page.locator("[data-rag-job=status]").inner_text()
    assert indexed(chat_server_env, term) == ["indexed"]
    # The summary says what it counts, and the fields below it add to it instead of repeating it.
    chunks = {"en": "chunks", "zh-hant": "段落"}[page.language]
    assert re.search(rf"^\d+/\d+ {chunks} \(100%\)$", page.locator("[data-rag-job=numbers]").inner_text())
    details = page.locator("#content-main fieldset").inner_text()
    assert "Progress done" not in details and "Log" not in details.splitlines()
    assert "{" not in page.locator(".rag-report").inner_text()  # the report as a list, not raw JSON

    page.goto(chat_server + f"/admin/rag_documents/document/?q={term}")
    page.locator("input.action-select").first.check()
    page.select_option("select[name=action]", "delete_documents")
    assert WORD[page.language] in page.locator("select[name=action] option[value=delete_documents]").inner_text()
    page.locator("button[name=index]").click()
    # A confirmation names the file and every document it holds before anything is removed.
    confirmation = page.locator("#content-main")
    confirmation.locator(".deleted-files").wait_for()
    assert upload.name in confirmation.inner_text() and f"The {term} policy" in confirmation.inner_text()
    device = "phone" if page.viewport_size["width"] < 600 else "desktop"
    page.screenshot(path=str(screenshot_dir / f"admin-delete-documents-{device}-{page.language}.png"))
    assert indexed(chat_server_env, term) == ["indexed"]
    confirmation.locator("input[type=submit]").click()
    page.wait_for_url("**/indexjob/*/change/")
    page.locator("#rag-job[data-finished='1']").wait_for(timeout=JOB_TIMEOUT_MS)
    succeeded = {"en": "succeeded", "zh-hant": "成功"}[page.language]  # the job's state in the page's language
    assert succeeded in page.locator("[data-rag-job=status]").inner_text()
    assert indexed(chat_server_env, term) == ["deleted"]
    assert not (Path(chat_server_env["DATA_DIR"]) / "uploads" / upload.name).exists()


# What the prompt admin says after a save: our message beside Django's own, in one language.
SAVED = {
    "en": (
        re.compile(r"^Saved as translator-system v\d+; v\d+ is unchanged\. Labels of the new version: latest\.$"),
        "was changed successfully",
    ),
    "zh-hant": (re.compile(r"^已另存為 translator-system v\d+；v\d+ 保持不變。新版本的標籤：latest。$"), "成功修改"),
}


def test_saving_a_prompt_says_so_in_the_admin_language(
    admin: Any, chat_server: str, chat_server_env: dict[str, str], screenshot_dir: Path
) -> None:
    page = admin
    newest = server_query(
        chat_server_env,
        "from prompts.models import Prompt\n"
        "result = Prompt.objects.filter(name='translator-system').order_by('-version').values_list('pk', flat=True)[0]",
    )
    page.goto(chat_server + f"/admin/prompts/prompt/{newest}/change/")
    template = page.locator("#id_template")
    template.fill(template.input_value() + f"\nKeep product names as they are ({page.language}).")
    page.locator("input[name=_save]").click()
    page.wait_for_url("**/admin/prompts/prompt/")
    messages = page.locator("ul.messagelist li").all_inner_texts()
    ours, djangos = SAVED[page.language]
    assert any(ours.match(message) for message in messages), messages
    assert any(djangos in message for message in messages), messages
    if page.language == "zh-hant":
        # The list's own words: the model's name in the title, the columns and the actions.
        assert page.title().startswith("選擇 提示詞 來修改")
        columns = page.locator("#result_list thead").inner_text()
        assert "版本" in columns and "標籤" in columns and not re.search(r"[A-Za-z]", columns), columns
        actions = page.locator("select[name=action]").inner_text()
        assert "將選取的版本升為 production" in actions and "Promote" not in actions
    device = "phone" if page.viewport_size["width"] < 600 else "desktop"
    page.screenshot(path=str(screenshot_dir / f"admin-prompt-saved-{device}-{page.language}.png"))


def indexed(env: dict[str, str], term: str) -> list[str]:
    """The statuses of the documents whose title names `term`, as the server's database has them."""
    return server_query(
        env,
        "from rag.documents.models import Document\n"
        f"result = list(Document.objects.filter(title__contains={term!r}).values_list('status', flat=True))",
    )


def contrast(page: Any, selector: str) -> float:
    """WCAG contrast ratio between an element's text and the background of the nearest box that paints one."""
    return page.eval_on_selector(
        selector,
        """(e) => {
            const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
            const linear = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
            const lum = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
            const clear = (node) => {
                const c = rgb(getComputedStyle(node).backgroundColor);
                return c.length === 4 && !c[3];
            };
            let box = e;
            while (box.parentElement && clear(box)) box = box.parentElement;
            const fg = lum(rgb(getComputedStyle(e).color)), bg = lum(rgb(getComputedStyle(box).backgroundColor));
            return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
        }""",
    )


def with_long_queues(route: Any) -> None:
    """The real status, with six requests waiting per backend under long ids (as a busy deployment has)."""
    response = route.fetch()
    status = response.json()
    for worker in status["workers"]:
        worker["worker_id"] = "daphne-worker-" + "7f3a9c2e" * 5
        for backend in worker["manager"]["backends"].values():
            backend["queue_head"] = [
                {"request_id": f"{i:02d}" + "c0ffee42" * 4, "priority": 3, "boosted": i == 0, "waited_ms": 1234.5}
                for i in range(6)
            ]
    route.fulfill(response=response, json=status)


def test_the_console_fits_a_1400px_window_with_readable_captions_and_named_times(
    chromium: Any, chat_server: str, staff: tuple[str, str]
) -> None:
    page = admin_page(chromium, chat_server, language="en", phone=False)  # 1,400 px wide, New York time
    try:
        log_in(page, staff)
        page.route("**/api/v1/admin/concurrency/status*", with_long_queues)
        page.goto(chat_server + "/admin/concurrency/concurrencysettings/console/")
        page.locator("[data-cc=queue-rows] td", has_text="c0ffee42").first.wait_for()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert page.eval_on_selector(".cc-queues", "e => e.scrollWidth <= e.clientWidth"), "the queue table overflows"
        assert contrast(page, "[data-cc=mode-note]") >= 4.5
        assert "boosted" in page.locator(".cc-queues").inner_text()  # an English browser reads English
        # One zone on the page, the viewer's, named: the settings' time, the workers' start, the live clock.
        zone = re.compile(r"\b(EST|EDT|GMT-[45])\b")
        assert zone.search(page.locator(".cc-strip").inner_text()), page.locator(".cc-strip").inner_text()
        started = page.locator("[data-cc=worker-rows] td").nth(1).inner_text()
        assert zone.search(started) and "UTC" not in started
    finally:
        page.context.close()
    assert not page.errors


def test_the_console_writes_its_live_texts_in_the_admin_language(
    chromium: Any, chat_server: str, staff: tuple[str, str]
) -> None:
    page = admin_page(chromium, chat_server, language="zh-hant", phone=False)
    try:
        log_in(page, staff)
        page.route("**/api/v1/admin/concurrency/status*", with_long_queues)
        page.goto(chat_server + "/admin/concurrency/concurrencysettings/console/")
        page.locator("[data-cc=conn]", has_text="即時").wait_for()  # the first refresh answered
        page.locator("[data-cc=queue-rows] td", has_text="c0ffee42").first.wait_for()
        queues = page.locator(".cc-queues").inner_text()
        assert "3 已提升" in queues and "1235 毫秒" in queues, queues
        assert "boosted" not in queues and "connecting" not in page.locator(".cc-strip").inner_text()
        assert re.search(r"剛剛|\d+ 秒前", page.locator("[data-cc=worker-rows]").inner_text())
        assert "最高" in page.locator(".cc-card figcaption").first.inner_text()
    finally:
        page.context.close()
    assert not page.errors
