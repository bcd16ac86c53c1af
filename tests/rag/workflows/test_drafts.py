"""Drafts: every save archived, versions compared and restored exactly, publishing only what can run."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.test import Client

from rag.workflows import services
from rag.workflows.models import WorkflowDraft, WorkflowDraftVersion
from tests.rag.workflows.conftest import default_graph, lean_graph, post_json

DRAFTS = "/api/v1/rag/workflows/drafts"
pytestmark = pytest.mark.django_db


def test_every_save_is_archived_and_a_restore_brings_back_the_exact_graph(staff_user: User) -> None:
    first = lean_graph() | {"layout": {"guard": [10, 20]}}
    draft = services.workflow_draft_create(name="lean", graph=first, user=staff_user)
    second = copy.deepcopy(first)
    second["nodes"][0]["params"] = {"max_chars": 500, "blocked_patterns": ["秘密", "\\bsecret\\b"]}
    second["layout"]["guard"] = [300, 40]
    services.workflow_draft_save(draft_id=draft.pk, graph=second, user=staff_user, note="tighter guard")
    third = default_graph()
    services.workflow_draft_save(draft_id=draft.pk, graph=third, user=staff_user)

    archived = {v.version: v.graph for v in WorkflowDraftVersion.objects.filter(draft=draft)}
    assert archived == {1: first, 2: second, 3: third}

    restored = services.workflow_draft_restore(draft_id=draft.pk, version=2, user=staff_user)
    assert restored.version == 4
    assert restored.graph == second
    assert WorkflowDraftVersion.objects.get(draft=draft, version=4).graph == second
    assert WorkflowDraftVersion.objects.get(draft=draft, version=4).note == "restored v2"
    restored.refresh_from_db()  # through the database's JSON round trip, too
    assert restored.graph == second


def test_versions_restore_and_compare_through_the_api(staff_client: Client) -> None:
    created = post_json(staff_client, DRAFTS, {"name": "lean", "graph": lean_graph()})
    assert created.status_code == 201
    draft_id = created.json()["id"]
    changed = lean_graph()
    changed["nodes"].append({"id": "telemetry", "type": "telemetry", "params": {}})
    changed["edges"][-1]["target"] = "telemetry"
    changed["edges"].append({"source": "telemetry", "target": "END", "route": "default"})
    saved = post_json(staff_client, f"{DRAFTS}/{draft_id}", {"graph": changed, "note": "count", "expected_version": 1})
    assert saved.status_code == 200 and saved.json()["version"] == 2

    versions = staff_client.get(f"{DRAFTS}/{draft_id}/versions").json()["versions"]
    assert [(v["version"], v["note"], v["author"]) for v in versions] == [
        (2, "count", "editor"),
        (1, "created", "editor"),
    ]

    diff = staff_client.get(f"{DRAFTS}/{draft_id}/diff", {"a": 1, "b": 2}).json()
    assert diff["identical"] is False
    assert diff["nodes_added"] == ["telemetry"]
    assert diff["edges_added"] == ["response_synth --default--> telemetry", "telemetry --default--> END"]
    assert diff["edges_removed"] == ["response_synth --default--> END"]
    assert any(line.startswith("+") and '"telemetry"' in line for line in diff["unified"])

    restored = post_json(staff_client, f"{DRAFTS}/{draft_id}/restore", {"version": 1})
    assert restored.status_code == 200
    assert restored.json()["version"] == 3
    assert restored.json()["graph"] == lean_graph()
    assert staff_client.get(f"{DRAFTS}/{draft_id}/versions/1").json()["graph"] == restored.json()["graph"]
    assert staff_client.get(f"{DRAFTS}/{draft_id}/diff", {"a": 1}).json()["identical"] is True


def test_a_save_over_someone_elses_newer_version_is_refused(staff_client: Client) -> None:
    draft_id = post_json(staff_client, DRAFTS, {"name": "lean", "graph": lean_graph()}).json()["id"]
    assert (
        post_json(staff_client, f"{DRAFTS}/{draft_id}", {"graph": lean_graph(), "expected_version": 1}).status_code
        == 200
    )
    stale = post_json(staff_client, f"{DRAFTS}/{draft_id}", {"graph": default_graph(), "expected_version": 1})
    assert stale.status_code == 409
    assert "now v2, you edited v1" in stale.json()["error"]["message"]
    assert WorkflowDraft.objects.get(pk=draft_id).version == 2


def test_the_default_is_read_only_and_can_be_copied(staff_client: Client) -> None:
    default = staff_client.get("/api/v1/rag/workflows/default").json()
    assert default["read_only"] is True and default["valid"] is True
    listed = staff_client.get(DRAFTS).json()["drafts"]
    assert listed[0]["id"] == "default" and listed[0]["read_only"] is True

    copied = post_json(staff_client, DRAFTS, {"name": "my pipeline", "copy_default": True})
    assert copied.status_code == 201
    body = copied.json()
    assert body["valid"] is True and body["version"] == 1
    assert {k: v for k, v in body["graph"].items() if k != "name"} == {
        k: v for k, v in default["graph"].items() if k != "name"
    }
    # Names are unique, and "default" belongs to the built-in workflow.
    assert post_json(staff_client, DRAFTS, {"name": "my pipeline", "copy_default": True}).status_code == 400
    reserved = post_json(staff_client, DRAFTS, {"name": "Default", "copy_default": True})
    assert reserved.status_code == 400 and "built-in" in reserved.json()["error"]["message"]


def test_saving_stores_the_validation_result(staff_client: Client) -> None:
    broken = lean_graph()
    broken["edges"] = [e for e in broken["edges"] if e["route"] != "blocked"]
    body = post_json(staff_client, DRAFTS, {"name": "broken", "graph": broken}).json()
    assert body["valid"] is False
    assert [(p["code"], p["node"]) for p in body["problems"]] == [("missing_route", "guard")]
    revalidated = post_json(staff_client, f"{DRAFTS}/{body['id']}/validate", {}).json()
    assert (revalidated["valid"], revalidated["version"]) == (False, 1)
    assert revalidated["problems"] == body["problems"]


def test_publishing_refuses_an_invalid_draft_with_its_problems(staff_client: Client) -> None:
    broken = lean_graph()
    broken["edges"] = [e for e in broken["edges"] if e["route"] != "blocked"]
    draft_id = post_json(staff_client, DRAFTS, {"name": "broken", "graph": broken}).json()["id"]
    response = post_json(staff_client, f"{DRAFTS}/{draft_id}/publish", {"backend": "chat"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_workflow"
    assert error["problems"][0]["node"] == "guard"
    assert not WorkflowDraft.objects.get(pk=draft_id).published
    bad_backend = post_json(staff_client, f"{DRAFTS}/{draft_id}/publish", {"backend": "sms"})
    assert bad_backend.status_code == 400 and "'backend' must be one of chat, responses" in bad_backend.text


def test_one_published_draft_per_backend(staff_client: Client, staff_user: User) -> None:
    first = services.workflow_draft_create(name="first", graph=lean_graph("first"), user=staff_user)
    second = services.workflow_draft_create(name="second", graph=lean_graph("second"), user=staff_user)
    assert post_json(staff_client, f"{DRAFTS}/{first.pk}/publish", {"backend": "chat"}).status_code == 200
    published = post_json(staff_client, f"{DRAFTS}/{second.pk}/publish", {"backend": "chat"}).json()
    assert (published["published"], published["backend"], published["published_version"]) == (True, "chat", 1)
    first.refresh_from_db()
    assert (first.published, first.backend) == (False, "")

    # Editing a published draft does not change what runs until it is published again.
    services.workflow_draft_save(draft_id=second.pk, graph=default_graph(), user=staff_user)
    second.refresh_from_db()
    assert second.published_version == 1 and second.published_graph == lean_graph("second")

    unpublished = post_json(staff_client, f"{DRAFTS}/{second.pk}/unpublish", {}).json()
    assert (unpublished["published"], unpublished["backend"]) == (False, "")
    assert not WorkflowDraft.objects.filter(published=True).exists()


def test_the_database_itself_keeps_one_published_draft_per_backend(staff_user: User) -> None:
    services.workflow_draft_publish(
        draft_id=services.workflow_draft_create(name="a", graph=lean_graph()).pk, backend="responses"
    )
    other = services.workflow_draft_create(name="b", graph=lean_graph())
    with pytest.raises(IntegrityError), transaction.atomic():
        WorkflowDraft.objects.filter(pk=other.pk).update(published=True, backend="responses")


def test_a_published_draft_cannot_be_deleted_in_the_admin(admin_client: Client) -> None:
    draft = services.workflow_draft_create(name="live", graph=lean_graph())
    services.workflow_draft_publish(draft_id=draft.pk, backend="chat")
    assert admin_client.get(f"/admin/rag_workflows/workflowdraft/{draft.pk}/delete/").status_code == 403
    listing = admin_client.get("/admin/rag_workflows/workflowdraft/")
    assert listing.status_code == 200 and "chat (v1)" in listing.content.decode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "my\x00pipeline", "copy_default": True}, "name"),
        ({"name": "my\ud800pipeline", "copy_default": True}, "name"),
        ({"name": "x", "graph": {"name": "x", "nodes": [{"id": "a\x00"}]}}, "graph.nodes[0].id"),
    ],
)
def test_text_no_database_can_store_is_refused_naming_the_field(staff_client: Client, body: Any, field: str) -> None:
    response = staff_client.post(DRAFTS, json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request" and response.json()["error"]["field"] == field
    assert not WorkflowDraft.objects.exists()


def test_json_nested_far_too_deep_is_a_400(staff_client: Client) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for url in ("/api/v1/rag/workflows/validate", DRAFTS):
        response = staff_client.post(url, '{"graph": ' + deep + "}", content_type="application/json")
        assert response.status_code == 400 and "nested deeper" in response.json()["error"]["message"]


def test_a_huge_body_is_a_413_in_the_json_error_shape(staff_client: Client) -> None:
    for size in (600 * 1024, 20 * 1024 * 1024):  # past this API's limit; past Django's upload limit
        response = post_json(staff_client, DRAFTS, {"name": "x" * size})
        assert response.status_code == 413 and response.json()["error"]["code"] == "bad_request"


def test_ids_beyond_any_integer_column_are_a_400(staff_client: Client) -> None:
    created = post_json(staff_client, DRAFTS, {"name": "mine", "copy_default": True}).json()
    diff = staff_client.get(f"{DRAFTS}/{created['id']}/diff", {"a": str(10**30)})
    assert diff.status_code == 400 and diff.json()["error"]["code"] == "bad_request"
    restore = post_json(staff_client, f"{DRAFTS}/{created['id']}/restore", {"version": 10**30})
    assert restore.status_code == 400
