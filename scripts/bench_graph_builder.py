"""How long the graph builder takes to become usable, in headless Chromium, against running servers.

Each run opens a fresh browser context (empty cache), logs in, then loads the builder twice: "cold" (static files
fetched) and "warm" (cached). The time is the page's own clock (`performance.now()` from navigation start), taken
by a MutationObserver at the moment the canvas is drawn (`#graph-builder.ready`) and the engine's verdict shown, so
Python's polling adds nothing. With several URLs the runs alternate between them, so a busy machine slows both
alike. `--profile slow4g` emulates Lighthouse's slow 4G (150 ms round trip, 1.6 Mbit/s down, 750 kbit/s up) and a
CPU four times slower, which is where round trips show.

    python scripts/bench_graph_builder.py --url http://127.0.0.1:8000 --runs 5 --profile slow4g
"""

from __future__ import annotations

import argparse
import re
import statistics
from typing import Any

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
BUILDER = "/admin/rag_workflows/workflowdraft/builder/"
READY_TAP = """
(() => {
  const check = () => {
    const root = document.getElementById("graph-builder"), verdict = document.getElementById("gb-validity");
    const shown = verdict && /valid|problem/.test(verdict.textContent);
    if (!window.__readyAt && root && root.classList.contains("ready") && shown) {
      window.__readyAt = performance.now();
    }
  };
  const everything = {subtree: true, childList: true, attributes: true, characterData: true};
  new MutationObserver(check).observe(document, everything);
})();
"""


def slow_4g(context: Any, page: Any) -> None:
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    conditions = {"offline": False, "latency": 150, "downloadThroughput": 1.6e6 / 8, "uploadThroughput": 750e3 / 8}
    cdp.send("Network.emulateNetworkConditions", conditions)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})


def load_once(page: Any, url: str) -> tuple[float, list[str]]:
    """Milliseconds from navigation start to a usable builder, and the API requests made on the way."""
    from playwright.sync_api import expect

    api: list[str] = []

    def record(request: Any) -> None:
        if "/api/" in request.url:
            api.append(request.url.removeprefix(url))

    page.on("request", record)
    page.goto(url + BUILDER)
    page.wait_for_selector("#graph-builder.ready", timeout=60_000)
    expect(page.locator("#gb-validity")).to_have_text(re.compile("valid|problem"), timeout=60_000)
    ready = float(page.evaluate("window.__readyAt"))
    page.remove_listener("request", record)
    return ready, api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", action="append", required=True, help="a running server (repeat to compare)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", choices=("none", "slow4g"), default="slow4g")
    parser.add_argument("--username", default="builder")
    parser.add_argument("--password", default="a-long-test-password-7")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    times: dict[str, dict[str, list[float]]] = {url: {"cold": [], "warm": []} for url in args.url}
    requests: dict[str, list[str]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        for _ in range(args.runs):
            for url in args.url:
                context = browser.new_context(viewport={"width": 1600, "height": 940})
                context.add_init_script(READY_TAP)
                page = context.new_page()
                page.goto(f"{url}/admin/login/?next=/admin/")
                page.fill("#id_username", args.username)
                page.fill("#id_password", args.password)
                page.click("input[type=submit]")
                page.wait_for_url("**/admin/")
                if args.profile == "slow4g":
                    slow_4g(context, page)
                for kind in ("cold", "warm"):
                    ready, api = load_once(page, url)
                    times[url][kind].append(ready)
                    requests[url] = api
                context.close()
        browser.close()
    print(f"profile: {args.profile}; {args.runs} runs per server, alternating")
    print("| server | cold: median (all runs) | warm: median (all runs) | API requests while loading |")
    print("| --- | --- | --- | --- |")
    for url, kinds in times.items():
        cells = [f"{statistics.median(kinds[k]):.0f} ms ({', '.join(f'{t:.0f}' for t in kinds[k])})" for k in kinds]
        print(f"| {url} | {cells[0]} | {cells[1]} | {len(requests[url])}: {' '.join(requests[url]) or '-'} |")


if __name__ == "__main__":
    main()
