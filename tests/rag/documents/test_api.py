"""The job API: who may use it, what it accepts, what it answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from rag.documents.models import BackfillJob, IndexJob, JobStatus
from rag.documents.services import index_job_create, job_claim

pytestmark = pytest.mark.django_db
TOKEN = "t0ken-" + "x" * 40


@pytest.fixture
def staff_client(configured: Path) -> Client:
    user = get_user_model().objects.create_user("staff", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def member_client(configured: Path) -> Client:
    user = get_user_model().objects.create_user("member")
    client = Client()
    client.force_login(user)
    return client


def post(client: Client, url: str, body: Any = None, **headers: Any) -> Any:
    data = body if isinstance(body, str | bytes) else json.dumps(body or {})
    return client.post(url, data=data, content_type="application/json", **headers)


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/v1/rag/index-jobs"),
        ("post", "/api/v1/rag/index-jobs"),
        ("get", "/api/v1/rag/index-jobs/1"),
        ("post", "/api/v1/rag/index-jobs/1/cancel"),
        ("get", "/api/v1/rag/backfill-jobs"),
        ("post", "/api/v1/rag/backfill-jobs"),
        ("get", "/api/v1/rag/backfill-jobs/1"),
        ("post", "/api/v1/rag/backfill-jobs/1/cancel"),
    ],
)
def test_anonymous_and_non_staff_get_403_json(configured: Path, member_client: Client, method: str, url: str) -> None:
    for client in (Client(), member_client):
        response = getattr(client, method)(url)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    assert not IndexJob.objects.exists() and not BackfillJob.objects.exists()


def test_staff_create_follow_and_cancel_an_index_job(staff_client: Client, corpus: Path) -> None:
    response = post(staff_client, "/api/v1/rag/index-jobs", {"paths": ["zh-enrolment.md"], "full": True})
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["kind"] == "index" and job["status"] == "pending" and job["full"] is True
    assert job["paths"] == [str((corpus / "zh-enrolment.md").resolve())]
    assert job["created_by"] == "staff" and job["created_from"] == "api"
    assert response["Location"] == f"/api/v1/rag/index-jobs/{job['id']}"

    detail = staff_client.get(response["Location"])
    assert detail.status_code == 200 and detail.json()["progress"] == {"done": 0, "total": 0, "percent": 0}
    listed = staff_client.get("/api/v1/rag/index-jobs").json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]

    cancelled = post(staff_client, f"/api/v1/rag/index-jobs/{job['id']}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    again = post(staff_client, f"/api/v1/rag/index-jobs/{job['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "finished"
    assert staff_client.get("/api/v1/rag/index-jobs/999").status_code == 404


def test_cancelling_a_running_job_asks_it_to_stop(staff_client: Client) -> None:
    job = index_job_create()
    job_claim(job=job, runner="host:1")
    response = post(staff_client, f"/api/v1/rag/index-jobs/{job.pk}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "running" and response.json()["cancel_requested"] is True


def test_no_paths_means_the_corpus_and_uploads_are_allowed(staff_client: Client, configured: Path) -> None:
    from rag.documents.sources import uploads_dir

    response = post(staff_client, "/api/v1/rag/index-jobs", {})
    assert response.status_code == 201 and response.json()["paths"] == []
    upload = str(uploads_dir() / "faq.pdf")
    response = post(staff_client, "/api/v1/rag/index-jobs", {"paths": [upload], "format": "pdf"})
    assert response.status_code == 201 and response.json()["paths"] == [str(Path(upload).resolve())]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"paths": ["/etc/passwd"]}, "paths"),
        ({"paths": ["../../../etc"]}, "paths"),
        ({"paths": ["link-out/secret.md"]}, "paths"),
        ({"paths": "zh-enrolment.md"}, "paths"),
        ({"paths": [1]}, "paths"),
        ({"paths": [""]}, "paths"),
        ({"format": "odt"}, "format"),
        ({"full": "yes"}, "full"),
        ({"fulll": True}, "fulll"),
        ("not json", "body"),
        ("[1, 2]", "body"),
        ({"paths": ["guide\ud800.md"]}, "paths[0]"),
        ({"paths": ["guide\x00.md"]}, "paths[0]"),
    ],
)
def test_bad_index_job_input_is_a_400_naming_the_field(
    staff_client: Client, corpus: Path, tmp_path: Path, body: Any, field: str
) -> None:
    (tmp_path / "outside").mkdir()
    (corpus / "link-out").symlink_to(tmp_path / "outside")
    response = post(staff_client, "/api/v1/rag/index-jobs", body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field and response.json()["error"]["code"] == "bad_request"
    assert not IndexJob.objects.exists()


def test_backfill_jobs_need_an_llm(staff_client: Client, settings: Any) -> None:
    response = post(staff_client, "/api/v1/rag/backfill-jobs", {"limit": 5})
    assert response.status_code == 409 and response.json()["error"]["code"] == "no_llm"
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    response = post(staff_client, "/api/v1/rag/backfill-jobs", {"limit": 5})
    assert response.status_code == 201 and response.json()["limit"] == 5
    cases = (({"limit": 0}, "limit"), ({"limit": "5"}, "limit"), ({"limit": True}, "limit"), ({"x": 1}, "x"))
    for body, field in cases:
        bad = post(staff_client, "/api/v1/rag/backfill-jobs", body)
        assert bad.status_code == 400 and bad.json()["error"]["field"] == field
    job_id = response.json()["id"]
    assert post(staff_client, f"/api/v1/rag/backfill-jobs/{job_id}/cancel").json()["status"] == JobStatus.CANCELLED


def test_a_backfill_limit_beyond_any_integer_column_is_a_400(staff_client: Client, settings: Any) -> None:
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    response = post(staff_client, "/api/v1/rag/backfill-jobs", {"limit": 10**30})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "limit" and response.json()["error"]["code"] == "bad_request"
    assert not BackfillJob.objects.exists()


@pytest.mark.parametrize("url", ["/api/v1/rag/index-jobs", "/api/v1/rag/backfill-jobs"])
def test_a_huge_body_is_a_413_in_the_json_error_shape(staff_client: Client, url: str) -> None:
    for size in (100 * 1024, 20 * 1024 * 1024):  # past this API's limit; past Django's upload limit
        response = post(staff_client, url, {"paths": ["x" * size]})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "bad_request"
    assert not IndexJob.objects.exists() and not BackfillJob.objects.exists()


def test_the_api_token_works_without_a_session_or_csrf(configured: Path, settings: Any) -> None:
    settings.CONCURRENCY_API_TOKEN = TOKEN
    client = Client(enforce_csrf_checks=True)
    response = post(client, "/api/v1/rag/index-jobs", {}, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 201
    assert response.json()["created_by"] is None
    assert client.get("/api/v1/rag/index-jobs", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    settings.CONCURRENCY_API_TOKEN = ""
    assert client.get("/api/v1/rag/index-jobs", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_a_staff_session_needs_its_csrf_token_to_write(configured: Path) -> None:
    user = get_user_model().objects.create_user("staff", is_staff=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/api/v1/rag/index-jobs").status_code == 200
    refused = post(client, "/api/v1/rag/index-jobs", {})
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    client.get("/admin/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    accepted = post(client, "/api/v1/rag/index-jobs", {}, HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201
