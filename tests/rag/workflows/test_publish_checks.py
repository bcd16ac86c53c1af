"""Tests before publishing: a draft that breaks a test-set question production answers cannot be published
without an override, whose reason is recorded; the check shows pass and fail beside production's."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from rag.workflows import services
from rag.workflows.models import PublishCheck, PublishTest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def staff_async_client(staff_user: User) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    return client


def no_retrieval_graph() -> dict[str, Any]:
    """A draft that answers without searching: it cannot say what the content says."""
    nodes = ("guard", "language_normalizer", "planner", "response_synth")
    return {
        "name": "no-retrieval",
        "entry": "guard",
        "nodes": [{"id": node, "type": node, "params": {}} for node in nodes],
        "edges": [
            {"source": "guard", "target": "language_normalizer", "route": "default"},
            {"source": "guard", "target": "END", "route": "blocked"},
            {"source": "language_normalizer", "target": "planner", "route": "default"},
            {"source": "planner", "target": "response_synth", "route": "retrieve"},
            {"source": "planner", "target": "response_synth", "route": "followup"},
            {"source": "planner", "target": "response_synth", "route": "direct"},
            {"source": "response_synth", "target": "END", "route": "default"},
        ],
    }


async def test_a_draft_that_breaks_a_test_question_needs_an_override_with_a_reason(
    staff_async_client: AsyncClient,
) -> None:
    await PublishTest.objects.acreate(
        question="How do I reset my password?", must_contain=[], must_cite=["en-password-reset"]
    )
    draft = await sync_to_async(services.workflow_draft_create)(name="no-retrieval", graph=no_retrieval_graph())
    publish = f"/api/v1/rag/workflows/drafts/{draft.pk}/publish"

    unchecked = await staff_async_client.post(publish, {"backend": "chat"}, content_type="application/json")
    assert unchecked.status_code == 409 and unchecked.json()["error"]["code"] == "tests_failed"
    # what the builder's publish dialog shows: no run of this version yet, one test to run
    assert (unchecked.json()["error"]["check"], unchecked.json()["error"]["tests"]) == (None, 1)

    checked = await staff_async_client.post(
        f"/api/v1/rag/workflows/drafts/{draft.pk}/check", {"backend": "chat"}, content_type="application/json"
    )
    assert checked.status_code == 200, checked.content
    [result] = checked.json()["results"]
    assert result["production_passed"] is True and result["draft_passed"] is False
    assert checked.json()["regressions"] == 1

    refused = await staff_async_client.post(publish, {"backend": "chat"}, content_type="application/json")
    assert refused.status_code == 409 and "1 test(s) production passes" in refused.json()["error"]["message"]
    # the refusal carries the version's results beside production's, per test, for the publish dialog
    shown = refused.json()["error"]["check"]
    assert (shown["version"], shown["regressions"], shown["passed"]) == (draft.version, 1, 0)
    [row] = shown["results"]
    assert (row["question"], row["draft_passed"], row["production_passed"]) == (
        "How do I reset my password?",
        False,
        True,
    )
    assert row["draft_missing"] == ["source en-password-reset"] and row["production_missing"] == []
    listed = await staff_async_client.get(f"/api/v1/rag/workflows/drafts/{draft.pk}/check")
    assert listed.json()["tests"] == 1 and listed.json()["checks"][0]["id"] == shown["id"]

    overridden = await staff_async_client.post(
        publish, {"backend": "chat", "override_reason": "the FAQ is being rewritten"}, content_type="application/json"
    )
    assert overridden.status_code == 200, overridden.content
    check = await PublishCheck.objects.aget(draft=draft)
    assert check.override_reason == "the FAQ is being rewritten" and check.overridden_by
