"""Browser tests: the chat page in headless Chromium (Playwright) against a real daphne server.

The server runs in a subprocess with a data folder of its own (migrated and indexed), a copy of the demo corpus
plus one document full of HTML that must never run, and answer deltas slowed down (`tests.browser.slow_asgi`)
so a test can stop or cut an answer while it streams. Only the system Chromium is used; when it is missing,
every test here is skipped with a message saying how to get it.

Screenshots go to the test's own temporary folder, so a test run leaves the checkout as it was; with
`UPDATE_SCREENSHOTS=1` (`make screenshots`) they replace the ones in docs/screenshots/.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from tests.waiting import poll

ROOT = Path(__file__).resolve().parents[2]
MANAGE = [sys.executable, str(ROOT / "manage.py")]
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Seconds between answer deltas on the test server: an answer takes a few seconds, long enough to act mid-way.
ANSWER_DELAY = "0.03"
SLOW_COOKIE = "hc_test_answer_delay"  # tests.browser.slow_asgi.COOKIE (not imported: it patches the app)
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"

# A document whose text is HTML and script: the page must show it as text and run none of it. (A `javascript:`
# url in front matter is refused when indexing, tests/rag/text/test_links.py; the body keeps such a link.)
INJECTION_DOC = """---
title: Zebra quartz <img src=x onerror="window.hcPwned='title'"> notice
url: https://help.example.org/zebra-quartz
language: en
tags: [test]
---

# Zebra quartz notice

The zebra quartz notice says <script>window.hcPwned=1</script> must appear as plain text.
The zebra quartz notice image <img src=x onerror="window.hcPwned=2"> must appear as plain text.
The zebra quartz notice link [open the notice](javascript:window.hcPwned=3) must not be clickable code.
"""


def _skip_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements-dev.txt)"
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        return (
            f"no Chromium at {CHROMIUM}: install the system browser (`apt-get install chromium`) or point "
            "CHROMIUM_PATH at one; Playwright's own browser download is not used"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    for item in items:
        if "tests/browser/" in item.nodeid:
            item.add_marker(pytest.mark.browser)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_answers(url: str) -> bool:
    try:
        return httpx.get(url + "/api/v1/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def screenshot_dir(tmp_path: Path) -> Path:
    """Where a test saves its screenshots: docs/screenshots/ only when UPDATE_SCREENSHOTS=1."""
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SCREENSHOTS
    return tmp_path


@pytest.fixture(scope="session")
def chat_server_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The test server's environment: a data folder of its own, migrated and indexed."""
    data_dir = tmp_path_factory.mktemp("browser-server")
    corpus = data_dir / "corpus"
    shutil.copytree(settings.CORPUS_DIR, corpus)
    (corpus / "en-zebra-quartz-injection.md").write_text(INJECTION_DOC, encoding="utf-8")
    env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "CORPUS_DIR": str(corpus),
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "RAG_RATE_LIMIT_PER_MINUTE": "0",
        "REDIS_URL": "",  # one worker: streams are kept in its memory
        "RAG_JOB_RUNNER": "true",  # the admin's uploads and deletes are index jobs this server runs
    }
    # The demo's words (its suggested questions on the page) with the demo documents already copied above.
    for command in (["migrate", "--noinput"], ["demo", "load"], ["reindex"]):
        subprocess.run([*MANAGE, *command], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    return env


# What `server_query` prints before its JSON, so nothing else Django writes to stdout is taken for it.
QUERY_MARK = "@@query@@ "


def server_query(env: dict[str, str], code: str) -> Any:
    """Run `code` (Python that sets `result`) in a Django shell on the test server's database; returns `result`.

    The server's own ORM, read from another process: what it stored, not what the page says it did.
    """
    program = f"import json\n{code}\nprint({QUERY_MARK!r} + json.dumps(result, default=str))"
    done = subprocess.run(
        [*MANAGE, "shell", "--no-imports", "-c", program],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith(QUERY_MARK))
    return json.loads(line.removeprefix(QUERY_MARK))


@pytest.fixture(scope="session")
def chat_server(chat_server_env: dict[str, str]) -> Iterator[str]:
    env = chat_server_env
    data_dir = Path(env["DATA_DIR"])
    port = _free_port()
    log = (data_dir / "daphne.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "tests.browser.slow_asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # Start-up loads the index replica and the settings: on a loaded shared machine that takes tens of seconds.
        answering = poll(lambda: server.poll() is not None or _server_answers(url), within=120, interval=0.1)
        if not answering or server.poll() is not None:
            raise RuntimeError(f"daphne did not start; see {data_dir / 'daphne.log'}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
        log.close()


# Module scope: a running sync Playwright keeps an event loop in this thread, and another module's own
# `sync_playwright()` (the graph builder's tests) refuses to start while one is open.
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


# Installed before the page's scripts: keeps every WebSocket the page opens and records the seq of every event
# it receives (over either transport), so a test can cut a connection and check that nothing was lost or
# applied twice. Only the test sees this; the page has no hooks of its own.
WIRE_TAP = """
(() => {
  window.__sockets = [];
  window.__seqs = [];
  const record = (text) => {
    for (const chunk of String(text).split("\\n")) {
      const json = chunk.startsWith("data: ") ? chunk.slice(6) : chunk;
      try {
        const e = JSON.parse(json);
        if (typeof e.seq === "number") {
          window.__seqs.push([e.request_id, e.seq]);
          // A DOM mark the tests can wait for with a locator (waiting on a JS expression is eval, which the
          // page's Content-Security-Policy forbids).
          document.documentElement.dataset.eventsSeen = String(window.__seqs.length);
        }
      }
      catch (_) {}
    }
  };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.__sockets.push(this);
      this.addEventListener("message", (m) => record(m.data));
    }
  };
  const nativeFetch = window.fetch.bind(window);
  window.__fetchControllers = [];
  window.fetch = async (input, init = {}) => {
    const response = await nativeFetch(input, init);
    if (!(response.headers.get("content-type") || "").startsWith("text/event-stream")) return response;
    // A copy of the body the test can cut (`window.__cutStreams()`), as a dropped connection would.
    const reader = response.body.getReader();
    let controllerRef;
    const decoder = new TextDecoder();
    const body = new ReadableStream({
      start(controller) { controllerRef = controller; window.__fetchControllers.push({ controller, reader }); },
      async pull(controller) {
        try {
          const { value, done } = await reader.read();
          if (done) { controller.close(); return; }
          record(decoder.decode(value));
          controller.enqueue(value);
        } catch (error) { try { controller.error(error); } catch (_) {} }
      },
      cancel() { reader.cancel().catch(() => {}); },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  window.__cutStreams = () => {
    for (const { controller, reader } of window.__fetchControllers.splice(0)) {
      reader.cancel().catch(() => {});
      try { controller.error(new TypeError("network error")); } catch (_) {}
    }
    for (const socket of window.__sockets) if (socket.readyState <= 1) socket.close();
  };
})();
"""


def slow_answers_for(page: Any, server: str) -> None:
    """Answers to this page's browser context stream `ANSWER_DELAY` seconds a delta (`tests.browser.slow_asgi`):
    for a test that acts while an answer is still streaming. Other tests get answers at full speed."""
    page.context.add_cookies([{"name": SLOW_COOKIE, "value": ANSWER_DELAY, "url": server}])


@pytest.fixture
def slow_answers(page: Any, chat_server: str) -> Any:
    slow_answers_for(page, chat_server)
    return page


@pytest.fixture
def page(chromium: Any, chat_server: str) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    context.add_init_script(WIRE_TAP)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(chat_server + "/")
    page.wait_for_selector("#suggestions button")
    yield page
    context.close()
    assert not errors, f"script errors on the page: {errors}"
