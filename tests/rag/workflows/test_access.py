"""Who may use the workflow APIs and the builder page: staff only, JSON 403 for anyone else."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.rag.workflows.conftest import default_graph, post_json

pytestmark = pytest.mark.django_db

READS = [
    "/api/v1/rag/nodes",
    "/api/v1/rag/workflows/default",
    "/api/v1/rag/workflows/drafts",
    "/api/v1/rag/workflows/drafts/1",
    "/api/v1/rag/workflows/drafts/1/versions",
]
WRITES = [
    ("/api/v1/rag/workflows/validate", {"graph": default_graph()}),
    ("/api/v1/rag/workflows/drafts", {"name": "x", "copy_default": True}),
    ("/api/v1/rag/workflows/drafts/1/publish", {"backend": "chat"}),
    ("/api/v1/rag/test-run", {"draft_id": "default", "question": "hi"}),
]


@pytest.fixture
def non_staff_client(django_user_model: type[User]) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("citizen", password="pw-citizen-123"))
    return client


@pytest.mark.parametrize("who", ["anonymous", "non_staff"])
def test_everyone_but_staff_gets_403_json(who: str, client: Client, non_staff_client: Client) -> None:
    caller = client if who == "anonymous" else non_staff_client
    for url in READS:
        response = caller.get(url)
        assert response.status_code == 403, url
        assert response.json()["error"]["code"] == "forbidden"
    for url, payload in WRITES:
        response = post_json(caller, url, payload)
        assert response.status_code == 403, url
        assert response["Content-Type"] == "application/json"


def test_staff_without_the_change_permission_may_look_but_not_change(django_user_model: type[User]) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-viewer-123", is_staff=True))
    assert client.get("/api/v1/rag/workflows/drafts").status_code == 200
    response = post_json(client, "/api/v1/rag/workflows/drafts", {"name": "mine", "copy_default": True})
    assert response.status_code == 403
    assert "permission" in response.json()["error"]["message"]


def test_posts_need_the_csrf_token_like_the_rest_of_the_admin(staff_user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    response = post_json(client, "/api/v1/rag/workflows/drafts", {"name": "mine", "copy_default": True})
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]  # the shared check's JSON refusal (infra.access)


def test_the_builder_page_is_an_admin_page(admin_client: Client, client: Client) -> None:
    response = admin_client.get("/admin/rag_workflows/workflowdraft/builder/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="graph-builder"' in html and "rag_workflows/builder.js" in html
    assert "/api/v1/rag/nodes" in html  # the page is told where its APIs are
    # The admin's login wall, not a JSON 403: this is a page.
    assert client.get("/admin/rag_workflows/workflowdraft/builder/").status_code == 302
    # Adding a draft in the admin opens the builder.
    assert admin_client.get("/admin/rag_workflows/workflowdraft/add/")["Location"].endswith("/builder/")
