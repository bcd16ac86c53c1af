"""`POST /api/v1/rag/test-run`: a graph from the canvas (or a saved draft) run on a question, streamed as SSE."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from rag.events import TERMINAL_CHANNELS
from rag.workflows import services
from tests.rag.workflows.conftest import LEAN_NODES, lean_graph

TEST_RUN = "/api/v1/rag/test-run"
pytestmark = pytest.mark.django_db(transaction=True)


def sse_events(body: bytes) -> list[dict[str, Any]]:
    events = []
    for frame in body.decode().split("\n\n"):
        lines = frame.strip().splitlines()
        if not lines:
            continue
        assert lines[0].startswith("id: ")
        event = json.loads("".join(line.removeprefix("data: ") for line in lines[1:]))
        assert int(lines[0].removeprefix("id: ")) == event["seq"]
        events.append(event)
    return events


async def collect(response: Any) -> bytes:
    return b"".join([chunk async for chunk in response.streaming_content])


@pytest.fixture
async def staff_async_client(staff_user: User) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    return client


async def test_a_canvas_graph_streams_its_nodes_and_ends_with_one_terminal(staff_async_client: AsyncClient) -> None:
    response = await staff_async_client.post(
        TEST_RUN,
        {"graph": lean_graph(), "question": "How do I reset my password?", "backend": "chat"},
        content_type="application/json",
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = sse_events(await collect(response))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["channel"] for e in events].count("meta_summary") == 1
    assert [e for e in events if e["channel"] in TERMINAL_CHANNELS] == [events[-1]]
    assert events[-1]["channel"] == "meta_summary" and events[-1]["sources"]
    started = [e["node"] for e in events if e["channel"] == "status" and e["stage"] == "start"]
    assert started == list(LEAN_NODES)
    assert any(e["channel"] == "answer" for e in events)
    assert {e["request_id"] for e in events} == {response["X-Request-Id"]}


async def test_a_saved_draft_or_the_default_runs_by_id(staff_async_client: AsyncClient) -> None:
    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
    for draft_id, first_nodes in (
        (draft.pk, ["guard", "language_normalizer", "planner"]),
        ("default", ["guard", "language_normalizer", "curated_lookup"]),
    ):
        response = await staff_async_client.post(
            TEST_RUN,
            {"draft_id": draft_id, "question": "如何重設密碼？", "backend": "responses"},
            content_type="application/json",
        )
        events = sse_events(await collect(response))
        started = [e["node"] for e in events if e["channel"] == "status" and e["stage"] == "start"]
        assert started[:3] == first_nodes
        assert events[-1]["channel"] == "meta_summary" and events[-1]["backend"] == "responses"


async def test_an_invalid_graph_is_a_400_with_its_problems(staff_async_client: AsyncClient) -> None:
    graph = lean_graph()
    graph["edges"] = [e for e in graph["edges"] if e["source"] != "tool_executor"]
    response = await staff_async_client.post(
        TEST_RUN, {"graph": graph, "question": "hello"}, content_type="application/json"
    )
    assert response.status_code == 400
    error = json.loads(response.content)["error"]
    assert error["code"] == "invalid_workflow"
    assert ("missing_route", "tool_executor") in {(p["code"], p["node"]) for p in error["problems"]}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"graph": lean_graph(), "question": "  "}, "'question' must be a non-empty string"),
        (
            {"graph": lean_graph(), "question": "x" * 2001},
            "'question' is 2001 characters long; the limit is 2000",
        ),
        ({"graph": lean_graph(), "question": "hi", "backend": "fax"}, "'backend' must be one of"),
        ({"question": "hi"}, "either 'graph' or 'draft_id'"),
    ],
)
async def test_bad_requests_are_400(staff_async_client: AsyncClient, payload: dict, message: str) -> None:
    response = await staff_async_client.post(TEST_RUN, payload, content_type="application/json")
    assert response.status_code == 400
    assert message in json.loads(response.content)["error"]["message"]
