"""Publishing reaches every worker within a second: two daphne processes on one database and one Redis.

Both workers answer questions without pause while a workflow is published through one of them and later
unpublished through the other: each worker's requests switch to the new node sequence within a second of the
change, none fails, and each request runs the one workflow it started with.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.rag.workflows.conftest import LEAN_NODES, lean_graph
from tests.rag.workflows.live_server import QUESTIONS, Askers, LiveServer, default_shaped, live_servers
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

REDIS_URL = "redis://127.0.0.1:6379/1"
DRAFTS = "/api/v1/rag/workflows/drafts"
SWITCH_SECONDS = 1.0
ASKERS_PER_WORKER = 2

Shape = Callable[[list[str]], bool]


def lean_shaped(nodes: list[str]) -> bool:
    return nodes == list(LEAN_NODES)


@pytest.fixture(scope="module")
def workers() -> Iterator[list[LiveServer]]:
    with live_servers(2, redis_url=REDIS_URL) as running:
        yield running


def switch_under_traffic(
    staff: httpx.Client, path: str, payload: dict[str, Any], workers: list[LiveServer], old: Shape, new: Shape
) -> None:
    """POST the change through `staff` while every worker is busy answering; check each worker switched in time."""
    with contextlib.ExitStack() as stack:
        askers = [stack.enter_context(Askers(worker, ASKERS_PER_WORKER)) for worker in workers]
        # traffic on every worker first (each asker has had an answer), then the change in the middle of it
        wait_for(
            lambda: all(len({o.asker for o in on_worker.results}) == ASKERS_PER_WORKER for on_worker in askers),
            within=30.0,
            note=lambda: str([on_worker.errors for on_worker in askers]),
        )
        response = staff.post(path, json=payload)
        changed_at = time.monotonic()
        assert response.status_code == 200, response.text
        # Keep the traffic going past the deadline, so requests started after it are checked too: on each worker,
        # one answered that started a second after the change.
        wait_for(
            lambda: all(
                any(o.started > changed_at + SWITCH_SECONDS for o in on_worker.results) for on_worker in askers
            ),
            within=30.0,
            note=lambda: str([on_worker.errors for on_worker in askers]),
        )

    for name, on_worker in zip("AB", askers, strict=True):
        assert not on_worker.errors, (name, on_worker.errors)
        results = on_worker.results
        for outcome in results:
            assert outcome.completed, (name, outcome.status, outcome.events[-1:])
            # Each request ran one whole workflow: the one it started with.
            assert old(outcome.nodes) or new(outcome.nodes), (name, outcome.nodes)
        assert any(o.started < changed_at and old(o.nodes) for o in results), f"worker {name}: no request before"
        late = [o for o in results if o.started > changed_at + SWITCH_SECONDS]
        assert late, f"worker {name}: no request started a second after the change"
        assert all(new(o.nodes) for o in late), (name, [o.nodes for o in late if not new(o.nodes)])
        first_new = min(o.finished for o in results if new(o.nodes)) - changed_at
        assert first_new < SWITCH_SECONDS, f"worker {name} first answered with the change after {first_new:.2f}s"
        print(f"worker {name}: first answer on the changed workflow {first_new * 1000:.0f} ms after the change")


def test_publish_on_one_worker_and_unpublish_on_the_other_reach_both_within_a_second(
    workers: list[LiveServer],
) -> None:
    a, b = workers
    for worker in workers:
        status, events = worker.ask(worker.client(), QUESTIONS[0])
        assert status == 200 and events[-1]["channel"] == "meta_summary"
        assert default_shaped([e["node"] for e in events if e["channel"] == "status" and e["stage"] == "start"])

    staff_a, staff_b = a.staff_client(), b.staff_client()
    created = staff_a.post(DRAFTS, json={"name": "lean", "graph": lean_graph()})
    assert created.status_code == 201, created.text
    draft = f"{DRAFTS}/{created.json()['id']}"

    # Published through A: A applies it at once, B hears of it through Redis and reads it from the database.
    switch_under_traffic(staff_a, f"{draft}/publish", {"backend": "chat"}, workers, old=default_shaped, new=lean_shaped)
    # Unpublished through B: the news crosses the other way, and both return to the default workflow.
    switch_under_traffic(staff_b, f"{draft}/unpublish", {}, workers, old=lean_shaped, new=default_shaped)
