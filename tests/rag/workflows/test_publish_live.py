"""Publishing switches the pipeline of a running server within a second, with no restart and no failed request.

A real daphne process with its own database and index: ask over SSE, publish a different workflow through the
API while other clients keep asking, and watch the node sequence change; then unpublish from another process
(as a second worker or an admin shell would) and watch the default come back.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.rag.workflows.conftest import LEAN_NODES, lean_graph
from tests.rag.workflows.live_server import LiveServer, live_server, started_nodes

pytestmark = pytest.mark.slow

DRAFTS = "/api/v1/rag/workflows/drafts"
QUESTIONS = ("How do I reset my password?", "如何下載報名表？", "How do I change my email address?", "忘記密碼怎麼辦")
SWITCH_SECONDS = 1.0


@pytest.fixture(scope="module")
def server() -> Any:
    with live_server() as running:
        yield running


class Askers:
    """Clients asking one question after another on their own threads, recording each outcome."""

    def __init__(self, server: LiveServer, count: int) -> None:
        self.server = server
        self.results: list[tuple[float, int, list[dict[str, Any]]]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(count)]

    def _loop(self, index: int) -> None:
        client = self.server.client()
        n = index
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                status, events = self.server.ask(client, QUESTIONS[n % len(QUESTIONS)])
            except BaseException as exc:  # recorded: the assertion below names it
                with self._lock:
                    self.errors.append(exc)
                return
            with self._lock:
                self.results.append((started, status, events))
            n += 1

    def __enter__(self) -> Askers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def _default_shaped(nodes: list[str]) -> bool:
    return nodes[:3] == ["guard", "language_normalizer", "cache_lookup"] and nodes[-1] == "telemetry"


def _wait_for(server: LiveServer, client: Any, predicate: Any, *, limit: float) -> float:
    """Ask until the node sequence satisfies `predicate`; seconds it took (fails after `limit`)."""
    started = time.monotonic()
    while True:
        status, events = server.ask(client, "How do I reset my password?")
        assert status == 200 and events[-1]["channel"] == "meta_summary", events[-1:]
        if predicate(started_nodes(events)):
            return time.monotonic() - started
        assert time.monotonic() - started < limit, f"still {started_nodes(events)} after {limit}s"
        time.sleep(0.05)


def test_publish_reaches_the_running_server_within_a_second(server: LiveServer) -> None:
    staff = server.staff_client()
    asker = server.client()

    status, before = server.ask(asker, "How do I reset my password?")
    assert status == 200 and before[-1]["channel"] == "meta_summary"
    assert _default_shaped(started_nodes(before)), started_nodes(before)

    created = staff.post(DRAFTS, json={"name": "lean", "graph": lean_graph()})
    assert created.status_code == 201, created.text
    draft_id = created.json()["id"]

    with Askers(server, count=4) as askers:
        time.sleep(0.5)  # traffic first, then the switch in the middle of it
        response = staff.post(f"{DRAFTS}/{draft_id}/publish", json={"backend": "chat"})
        published_at = time.monotonic()
        assert response.status_code == 200, response.text
        switch = _wait_for(server, asker, lambda nodes: nodes == list(LEAN_NODES), limit=5.0)
        # Keep the traffic going past the deadline, so requests started after it are checked too.
        time.sleep(max(0.0, published_at + SWITCH_SECONDS + 0.5 - time.monotonic()))
    assert switch < SWITCH_SECONDS, f"the switch took {switch:.2f}s"

    assert not askers.errors, askers.errors
    assert len(askers.results) >= 8
    for started, status, events in askers.results:
        assert status == 200
        assert events[-1]["channel"] == "meta_summary", events[-1]
        nodes = started_nodes(events)
        # Each request ran one whole workflow: the one it started with.
        assert nodes == list(LEAN_NODES) or _default_shaped(nodes), nodes
        if started > published_at + SWITCH_SECONDS:
            assert nodes == list(LEAN_NODES)
    assert any(started < published_at for started, _, _ in askers.results)
    assert any(started > published_at + SWITCH_SECONDS for started, _, _ in askers.results)

    # The other backend was never touched.
    _, responses = server.ask(asker, "How do I reset my password?", backend="responses")
    assert _default_shaped(started_nodes(responses))

    # Unpublished by another process (a second worker, an admin shell): it reaches this one through the database.
    server.manage(
        "shell",
        "-c",
        f"from rag.workflows.services import workflow_draft_unpublish; workflow_draft_unpublish(draft_id={draft_id})",
    )
    back = _wait_for(server, asker, _default_shaped, limit=5.0)
    assert back < SWITCH_SECONDS, f"returning to the default took {back:.2f}s"
