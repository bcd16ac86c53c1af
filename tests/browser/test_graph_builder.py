"""The graph builder in a real browser: build a small workflow on the canvas, validate, save, test-run, publish.

Runs headless Chromium (the system's /usr/bin/chromium, never a downloaded one) against a real daphne server
with its own database and index, and takes screenshots (docs/screenshots/graph_builder*.png when
UPDATE_SCREENSHOTS=1, see `screenshot_dir`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rag.workflows.live_server import PASSWORD, USERNAME, LiveServer, live_server, started_nodes

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BUILT_NODES = ["guard", "language_normalizer", "planner", "query_builder", "tool_executor", "response_synth"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"needs Chromium at {CHROMIUM}: `apt-get install chromium` (or set CHROMIUM_PATH); "
        "the playwright package drives it, `playwright install` is not needed",
    ),
]

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (requirements-dev.txt)")
expect = sync_api.expect


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with live_server() as running:
        yield running


@pytest.fixture
def page(server: LiveServer) -> Iterator[Any]:
    yield from builder_page(server, locale="en-US")


def builder_page(server: LiveServer, *, locale: str) -> Iterator[Any]:
    """The builder, logged in as staff, in a browser that asks for `locale`; no script error allowed."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 940}, device_scale_factor=1, locale=locale)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.set_default_timeout(10_000)
        page.goto(f"{server.url}/admin/login/?next=/admin/rag_workflows/workflowdraft/builder/")
        page.fill("#id_username", USERNAME)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        expect(page.locator("#graph-builder.ready")).to_be_visible()
        yield page
        assert not errors, errors
        browser.close()


def node(page: Any, node_id: str) -> Any:
    return page.locator(f'#gb-canvas [data-node="{node_id}"]')


def settled(page: Any) -> None:
    """Live validation has answered (the canvas is redrawn with its result)."""
    expect(page.locator("#gb-validity")).not_to_have_text("checking…")


def drag_port_to(page: Any, source: str, route: str, target: str) -> None:
    """Draw an edge with the mouse: from a route's dot onto the target node."""
    settled(page)
    port = node(page, source).locator(f'[data-route="{route}"] .gb-port').bounding_box()
    box = node(page, target).locator(".gb-node-box").bounding_box()
    assert port and box, f"{source}.{route} or {target} is not on screen"
    page.mouse.move(port["x"] + port["width"] / 2, port["y"] + port["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + 20, box["y"] + 12, steps=8)
    page.mouse.up()


def connect_with_keyboard(page: Any, source: str, route: str, target: str) -> None:
    """The keyboard alternative: focus the node, Enter to the inspector, pick the route's target."""
    settled(page)
    node(page, source).focus()
    page.keyboard.press("Enter")
    page.locator(f'#gb-inspector select[data-route="{route}"]').select_option(target)


def test_build_validate_save_test_run_and_publish(page: Any, server: LiveServer, screenshot_dir: Path) -> None:
    page.once("dialog", lambda dialog: dialog.accept("small pipeline"))
    page.click("#gb-new")
    expect(page.locator("#gb-draft-state")).to_contain_text("v1")
    expect(page.locator("#gb-canvas .gb-empty")).to_be_visible()

    # Nodes: by mouse (drag from the palette onto the canvas), by click, and by keyboard (Enter in the palette).
    canvas = page.locator("#gb-canvas")
    page.locator('#gb-palette [data-type="guard"]').drag_to(canvas, target_position={"x": 120, "y": 140})
    expect(node(page, "guard")).to_be_visible()
    page.click('#gb-palette [data-type="language_normalizer"]')
    page.locator('#gb-palette [data-type="planner"]').focus()
    page.keyboard.press("Enter")
    for name in BUILT_NODES[3:]:
        page.click(f'#gb-palette [data-type="{name}"]')
    for name in BUILT_NODES:
        expect(node(page, name)).to_be_visible()

    # Unwired nodes are problems, shown on the node and in the list.
    expect(page.locator("#gb-validity")).to_contain_text("problem")
    expect(node(page, "guard")).to_have_class(re.compile(r"\bhas-problem\b"))
    expect(node(page, "guard").locator(".gb-node-problem")).to_contain_text("guard")
    expect(page.locator("#gb-problems")).to_contain_text("node 'tool_executor' (tool_executor) needs an outgoing edge")

    drag_port_to(page, "guard", "default", "language_normalizer")
    drag_port_to(page, "language_normalizer", "default", "planner")
    drag_port_to(page, "planner", "retrieve", "query_builder")
    drag_port_to(page, "query_builder", "default", "tool_executor")
    drag_port_to(page, "tool_executor", "default", "response_synth")
    drag_port_to(page, "response_synth", "default", "END")
    connect_with_keyboard(page, "guard", "blocked", "END")
    connect_with_keyboard(page, "planner", "followup", "response_synth")
    expect(node(page, "planner")).to_have_class(re.compile(r"\bhas-problem\b"))  # 'direct' is still open
    connect_with_keyboard(page, "planner", "direct", "response_synth")

    # A parameter from the node's typed inputs, and a bound on an edge.
    node(page, "response_synth").click()
    page.locator('#gb-inspector [data-param="max_sentences"]').fill("3")
    page.locator('#gb-inspector [data-param="max_sentences"]').press("Tab")
    node(page, "planner").click()
    page.locator('#gb-inspector [data-max-visits="direct"]').fill("1")
    page.locator('#gb-inspector [data-max-visits="direct"]').press("Tab")

    expect(page.locator("#gb-validity")).to_have_text("✓ valid")
    expect(page.locator("#gb-canvas .gb-node.has-problem")).to_have_count(0)
    page.click("#gb-arrange")
    page.click("#gb-fit")

    page.fill("#gb-note", "first working version")
    page.click("#gb-save")
    expect(page.locator("#gb-messages")).to_contain_text("Saved small pipeline v2")
    page.click("#gb-tab-versions")
    expect(page.locator("#gb-versions tbody tr")).to_have_count(2)
    page.click("#gb-versions >> text=Compare selected")
    expect(page.locator("#gb-diff")).to_contain_text("nodes added")

    # Test-run: the canvas's workflow on a question, its events streamed into the panel as they come.
    page.click("#gb-tab-run")
    page.fill("#gb-question", "How do I reset my password?")
    page.click("#gb-run")
    expect(page.locator("#gb-run-state")).to_have_text("finished", timeout=20_000)
    expect(page.locator("#gb-events .gb-ev.ch-meta_summary")).to_have_count(1)
    expect(page.locator("#gb-events .gb-ev.ch-error")).to_have_count(0)
    expect(page.locator("#gb-answer")).not_to_be_empty()
    expect(node(page, "response_synth")).to_have_class(re.compile(r"\bvisited\b"))

    page.select_option("#gb-backend", "chat")
    page.click("#gb-publish")
    # the publish dialog: with no publish tests there is nothing to run, and publishing needs no reason
    expect(page.locator("#gb-publish-summary")).to_have_text("There are no publish tests: nothing to run.")
    expect(page.locator("#gb-override")).to_be_hidden()
    page.click("#gb-publish-confirm")
    expect(page.locator("#gb-messages")).to_contain_text("Published small pipeline v2 on chat")
    expect(page.locator("#gb-publish-dialog")).to_be_hidden()
    expect(page.locator("#gb-draft-state")).to_contain_text("serving chat")

    page.locator("#gb-messages").evaluate("el => el.replaceChildren()")
    page.locator("#gb-palette").evaluate("el => { el.scrollTop = 0; }")
    page.screenshot(path=str(screenshot_dir / "graph_builder.png"), full_page=True)

    # And the chat backend of the running server now runs what was built.
    status, events = server.ask(server.client(), "How do I reset my password?")
    assert status == 200 and events[-1]["channel"] == "meta_summary"
    assert started_nodes(events) == BUILT_NODES

    # Unpublishing asks first: dismissed, the workflow keeps serving; accepted, the backend goes back to the default.
    asked: list[str] = []

    def answer(accept: bool) -> Any:
        def handle(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        return handle

    page.once("dialog", answer(False))
    page.click("#gb-unpublish")
    page.wait_for_timeout(500)  # time for a request that should not have been sent to come back
    expect(page.locator("#gb-messages")).not_to_contain_text("no longer serves")
    expect(page.locator("#gb-draft-state")).to_contain_text("serving chat")
    assert "Stop serving small pipeline on chat?" in asked[0]
    page.once("dialog", answer(True))
    page.click("#gb-unpublish")
    expect(page.locator("#gb-messages")).to_contain_text("no longer serves chat")
    assert len(asked) == 2


def test_the_default_is_read_only_a_copy_shows_problems_on_its_nodes_and_restores(
    page: Any, screenshot_dir: Path
) -> None:
    expect(page.locator("#gb-draft-state")).to_have_text("read-only")
    expect(page.locator("#gb-save")).to_be_disabled()
    expect(node(page, "cache_lookup")).to_be_visible()
    expect(page.locator("#gb-canvas .gb-entry")).to_have_text("▶ start")
    page.screenshot(path=str(screenshot_dir / "graph_builder_default.png"), full_page=False)

    page.once("dialog", lambda dialog: dialog.accept("without cache lookup"))
    page.click("#gb-copy")
    expect(page.locator("#gb-draft-state")).to_contain_text("v1")
    expect(page.locator("#gb-save")).to_be_enabled()

    # Delete a node with the keyboard: the nodes that depended on it turn red, with the engine's messages.
    node(page, "cache_lookup").focus()
    page.keyboard.press("Delete")
    expect(node(page, "cache_lookup")).to_have_count(0)
    expect(page.locator("#gb-validity")).to_contain_text("1 problem")
    # the curated-answer lookup stands before the cache lookup in the default workflow
    expect(node(page, "curated_lookup")).to_have_class(re.compile(r"\bhas-problem\b"))
    expect(node(page, "curated_lookup").locator(".gb-node-problem")).to_contain_text("needs an edge for route 'miss'")
    page.click("#gb-save")
    expect(page.locator("#gb-messages")).to_contain_text("Saved without cache lookup v2 with")
    page.click("#gb-publish")
    page.click("#gb-publish-confirm")
    expect(page.locator("#gb-messages")).to_contain_text("Not published")
    page.screenshot(path=str(screenshot_dir / "graph_builder_problems.png"), full_page=False)

    # Restore v1 from the versions tab: the exact graph comes back, and with it a valid workflow.
    page.click("#gb-tab-versions")
    page.click('#gb-versions button[aria-label="Restore v1"]')
    expect(page.locator("#gb-messages")).to_contain_text("Restored v1 as v3")
    expect(node(page, "cache_lookup")).to_be_visible()
    expect(page.locator("#gb-validity")).to_have_text("✓ valid")


NO_RETRIEVAL_NODES = ("guard", "language_normalizer", "planner", "response_synth")


def no_retrieval_graph() -> dict[str, Any]:
    """A workflow that answers without searching: it cannot cite what the content says."""
    edges = [("guard", "language_normalizer", "default"), ("guard", "END", "blocked")]
    edges += [("language_normalizer", "planner", "default"), ("response_synth", "END", "default")]
    edges += [("planner", "response_synth", route) for route in ("retrieve", "followup", "direct")]
    return {
        "name": "no retrieval",
        "entry": "guard",
        "nodes": [{"id": n, "type": n, "params": {}} for n in NO_RETRIEVAL_NODES],
        "edges": [{"source": a, "target": b, "route": r} for a, b, r in edges],
    }


def test_a_regressing_draft_shows_its_results_and_publishes_only_with_a_reason(
    page: Any, server: LiveServer, tmp_path: Path, screenshot_dir: Path
) -> None:
    test_file = tmp_path / "one-question.json"
    question = {"gold": ["Forgot password"], "en": ["How do I reset my password?", "en-password-reset"]}
    test_file.write_text(json.dumps({"questions": [question | {"zh": ["如何重設密碼？", "zh-password-reset"]}]}))
    staff = server.staff_client()
    draft_id = None
    try:
        assert "2 created" in server.manage("publish_tests", "import", str(test_file))
        created = staff.post(
            "/api/v1/rag/workflows/drafts", json={"name": "no retrieval", "graph": no_retrieval_graph()}
        )
        assert created.status_code == 201, created.text
        draft_id = created.json()["id"]
        page.goto(f"{server.url}/admin/rag_workflows/workflowdraft/builder/{draft_id}/")
        expect(page.locator("#graph-builder.ready")).to_be_visible()

        page.click("#gb-publish")
        dialog = page.locator("#gb-publish-dialog")
        expect(dialog.locator("#gb-publish-summary")).to_have_text("v1 has not been run against the 2 publish test(s).")
        expect(dialog.locator("#gb-publish-confirm")).to_have_text("Publish anyway")
        expect(dialog.locator("#gb-publish-confirm")).to_be_disabled()

        dialog.locator("#gb-check-run").click()
        expect(dialog.locator(".gb-results tbody tr")).to_have_count(2, timeout=30_000)
        expect(dialog.locator("#gb-publish-summary")).to_contain_text("regression(s)")
        row = dialog.locator(".gb-results tr.gb-regression", has_text="How do I reset my password?")
        expect(row.locator("td").nth(1)).to_contain_text("fail")
        expect(row.locator("td").nth(1)).to_contain_text("missing: Forgot password, source en-password-reset")
        expect(row.locator("td").nth(2)).to_have_text("pass")
        expect(dialog.locator("#gb-override")).to_be_visible()
        page.screenshot(path=str(screenshot_dir / "graph_builder_publish_tests.png"), full_page=False)

        dialog.locator("#gb-override-reason").fill("the FAQ is being rewritten")
        expect(dialog.locator("#gb-publish-confirm")).to_be_enabled()
        dialog.locator("#gb-publish-confirm").click()
        expect(page.locator("#gb-messages")).to_contain_text("Published no retrieval v1 on chat")
        checks = staff.get(f"/api/v1/rag/workflows/drafts/{draft_id}/check").json()["checks"]
        assert checks[0]["override_reason"] == "the FAQ is being rewritten" and checks[0]["overridden_by"] == USERNAME
    finally:
        # the module's server is shared: leave it without a test set and with its default workflow
        if draft_id is not None:
            staff.post(f"/api/v1/rag/workflows/drafts/{draft_id}/unpublish", json={})
        server.manage("shell", "-c", "from rag.workflows.models import PublishTest; PublishTest.objects.all().delete()")


def api_requests(page: Any) -> list[str]:
    """The paths of the builder's API requests from now on (the page's own document and static files aside)."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url) if "/api/" in request.url else None)
    return seen


def test_the_page_carries_what_the_builder_opens_on_so_loading_asks_the_api_nothing(
    page: Any, server: LiveServer
) -> None:
    # The default workflow: catalogue, drafts and the engine's verdict came with the page.
    requests = api_requests(page)
    page.reload()
    expect(page.locator("#graph-builder.ready")).to_be_visible()
    expect(node(page, "cache_lookup")).to_be_visible()
    expect(page.locator('#gb-palette [data-type="planner"]')).to_be_visible()
    expect(page.locator("#gb-validity")).to_have_text("✓ valid")
    assert requests == []

    # A saved draft opened by its address: its versions and its problems too.
    created = server.staff_client().post(
        "/api/v1/rag/workflows/drafts", json={"name": "opened by address", "copy_default": True}
    )
    assert created.status_code == 201, created.text
    draft_id = created.json()["id"]
    page.goto(f"{server.url}/admin/rag_workflows/workflowdraft/builder/{draft_id}/")
    expect(page.locator("#graph-builder.ready")).to_be_visible()
    expect(page.locator("#gb-draft-state")).to_contain_text("v1")
    expect(page.locator("#gb-validity")).to_have_text("✓ valid")
    page.click("#gb-tab-versions")
    expect(page.locator("#gb-versions tbody tr")).to_have_count(1)
    expect(page.locator("#gb-draft option")).to_contain_text(["default (built-in)", "opened by address · v1"])
    assert requests == []

    # An edit is still checked by the server's engine, as it happens.
    node(page, "cache_lookup").focus()
    page.keyboard.press("Delete")
    expect(page.locator("#gb-validity")).to_contain_text("1 problem")
    assert [url.removeprefix(server.url) for url in requests] == ["/api/v1/rag/workflows/validate"]


def test_an_unknown_draft_in_the_address_is_reported(page: Any, server: LiveServer) -> None:
    page.goto(f"{server.url}/admin/rag_workflows/workflowdraft/builder/{2**40}/")
    expect(page.locator("#gb-messages")).to_contain_text("could not start")


@pytest.fixture
def chinese_page(server: LiveServer) -> Iterator[Any]:
    yield from builder_page(server, locale="zh-TW")


def test_a_chinese_browser_gets_the_builder_in_traditional_chinese(chinese_page: Any, screenshot_dir: Path) -> None:
    page = chinese_page
    expect(page.locator("#gb-palette-title")).to_have_text("節點類型")
    expect(page.locator("#gb-save")).to_have_text("儲存")
    expect(page.locator("#gb-draft-state")).to_have_text("唯讀")
    expect(page.locator("#gb-validity")).to_have_text("✓ 有效")
    # A node's description in the inspector: the catalogue's zh-hant text.
    node(page, "planner").click()
    expect(page.locator("#gb-inspector-title")).to_have_text("節點")
    expect(page.locator("#gb-inspector")).to_contain_text("判斷問題類型")
    # Its parameters' help, and the entry node's badge, in the same language.
    expect(page.locator("#gb-inspector")).to_contain_text("LLM 規劃取得名額後可用的秒數")
    expect(page.locator("#gb-canvas .gb-entry")).to_have_text("▶ 起點")
    page.screenshot(path=str(screenshot_dir / "graph_builder_zh-hant.png"), full_page=False)
    page.once("dialog", lambda dialog: dialog.accept("中文副本"))
    page.click("#gb-copy")
    expect(page.locator("#gb-messages")).to_have_text("已建立 中文副本。")
    expect(page.locator("#gb-draft-state")).to_have_text("v1")
    node(page, "cache_lookup").focus()
    page.keyboard.press("Delete")
    expect(page.locator("#gb-validity")).to_have_text("✗ 1 個問題")
    expect(node(page, "curated_lookup")).to_have_attribute("aria-label", re.compile(r"，1 個問題："))
    toolbar = page.locator(".gb-toolbar").inner_text() + page.locator(".gb-tabs").inner_text()
    assert not re.search(r"\b(Draft|Save|Publish|Problems|Versions|Test run)\b", toolbar), toolbar
