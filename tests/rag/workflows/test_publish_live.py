"""Publishing switches the pipeline of a running server within a second, with no restart and no failed request.

A real daphne process with its own database and index: ask over SSE, publish a different workflow through the
API while other clients keep asking, and watch the node sequence change; then unpublish from another process
(as a second worker or an admin shell would) and watch the default come back.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.rag.workflows.conftest import LEAN_NODES, lean_graph
from tests.rag.workflows.live_server import Askers, LiveServer, default_shaped, live_server, started_nodes
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

DRAFTS = "/api/v1/rag/workflows/drafts"
SWITCH_SECONDS = 1.0


@pytest.fixture(scope="module")
def server() -> Any:
    with live_server() as running:
        yield running


def _wait_for(server: LiveServer, client: Any, predicate: Any, *, limit: float) -> float:
    """Ask until the node sequence satisfies `predicate`; seconds it took (fails after `limit`)."""
    started = time.monotonic()

    def nodes() -> list[str]:
        status, events = server.ask(client, "How do I reset my password?")
        assert status == 200 and events[-1]["channel"] == "meta_summary", events[-1:]
        return started_nodes(events)

    wait_for(nodes, predicate, within=limit, interval=0.05)
    return time.monotonic() - started


def test_publish_reaches_the_running_server_within_a_second(server: LiveServer) -> None:
    staff = server.staff_client()
    asker = server.client()

    status, before = server.ask(asker, "How do I reset my password?")
    assert status == 200 and before[-1]["channel"] == "meta_summary"
    assert default_shaped(started_nodes(before)), started_nodes(before)

    created = staff.post(DRAFTS, json={"name": "lean", "graph": lean_graph()})
    assert created.status_code == 201, created.text
    draft_id = created.json()["id"]

    with Askers(server, count=4) as askers:
        # traffic first (every asker has had an answer), then the switch in the middle of it
        wait_for(lambda: len({o.asker for o in askers.results}) == 4, within=30.0, note=lambda: str(askers.errors))
        response = staff.post(f"{DRAFTS}/{draft_id}/publish", json={"backend": "chat"})
        published_at = time.monotonic()
        assert response.status_code == 200, response.text
        switch = _wait_for(server, asker, lambda nodes: nodes == list(LEAN_NODES), limit=5.0)

        # Keep the traffic going past the deadline, so requests started after it are checked too.
        def traffic_past_the_deadline() -> bool:
            late = [o for o in askers.results if o.started > published_at + SWITCH_SECONDS]
            return len(askers.results) >= 8 and bool(late)

        wait_for(traffic_past_the_deadline, within=30.0, note=lambda: str(askers.errors))
    assert switch < SWITCH_SECONDS, f"the switch took {switch:.2f}s"

    assert not askers.errors, askers.errors
    assert len(askers.results) >= 8
    for outcome in askers.results:
        assert outcome.completed, (outcome.status, outcome.events[-1:])
        # Each request ran one whole workflow: the one it started with.
        assert outcome.nodes == list(LEAN_NODES) or default_shaped(outcome.nodes), outcome.nodes
        if outcome.started > published_at + SWITCH_SECONDS:
            assert outcome.nodes == list(LEAN_NODES)
    assert any(outcome.started < published_at for outcome in askers.results)
    assert any(outcome.started > published_at + SWITCH_SECONDS for outcome in askers.results)

    # The other backend was never touched.
    _, responses = server.ask(asker, "How do I reset my password?", backend="responses")
    assert default_shaped(started_nodes(responses))

    # Unpublished by another process (a second worker, an admin shell): it reaches this one through the database.
    server.manage(
        "shell",
        "-c",
        f"from rag.workflows.services import workflow_draft_unpublish; workflow_draft_unpublish(draft_id={draft_id})",
    )
    back = _wait_for(server, asker, default_shaped, limit=5.0)
    assert back < SWITCH_SECONDS, f"returning to the default took {back:.2f}s"
