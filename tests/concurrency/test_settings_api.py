"""`GET|PATCH /api/v1/admin/concurrency/settings`: the live settings for scripts, checked as the console's form."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from concurrency.selectors import concurrency_settings_get
from concurrency.services import concurrency_settings_update
from infra import access
from infra.access import bearer_key_checker_set
from tests.concurrency.manager_helpers import fresh_process_state

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.concurrency.urls")]

URL = "/api/v1/admin/concurrency/settings"
WRITE_KEY = "key-with-admin-write"
READ_KEY = "key-with-admin-read"


@pytest.fixture(autouse=True)
def process_state(settings) -> Iterator[None]:
    settings.REDIS_URL = ""
    settings.CONCURRENCY_API_TOKEN = "shared-read-token"
    with fresh_process_state():
        yield


@pytest.fixture
def keys() -> Iterator[None]:
    """A stand-in for the API keys app's check: two keys with one scope each."""
    scopes = {WRITE_KEY: "admin-write", READ_KEY: "admin-read"}

    def check(*, authorization: str, scope: str) -> bool:
        return scopes.get(authorization.removeprefix("Bearer ")) == scope

    registered = list(access._key_checkers)  # the project's own, as the app owning the keys registered it
    bearer_key_checker_set(check)
    yield
    bearer_key_checker_set(registered[0] if registered else None)


def patch(client, body, key: str | None = WRITE_KEY, content_type: str = "application/json"):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.patch(URL, data=data, content_type=content_type, headers=headers)


def test_a_write_key_changes_some_settings_and_keeps_the_others(client, keys) -> None:
    before = concurrency_settings_get()
    response = patch(client, {"limits": {"chat": 3}, "max_waiters": 7, "priority_enabled": True})

    assert response.status_code == 200, response.content
    saved = response.json()["settings"]
    assert saved["limits"]["chat"] == 3 and saved["max_waiters"] == 7 and saved["priority_enabled"] is True
    row = concurrency_settings_get()
    assert (row.limit_chat, row.max_waiters, row.priority_enabled, row.version) == (3, 7, True, before.version + 1)
    assert row.limit_responses == before.limit_responses and row.acquire_timeout == before.acquire_timeout

    response = patch(client, {"priority_enabled": False, "rpm": {"chat": 120}})
    assert response.status_code == 200
    row = concurrency_settings_get()
    assert (row.priority_enabled, row.rpm_chat) == (False, 120)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"limit_chat": 0}, "limit_chat"),  # the form's (and the model's) minimum
        ({"limit_chat": "4"}, "must be a number"),
        ({"limit_chat": 2.5}, "whole number"),
        ({"priority_enabled": 1}, "true or false"),
        ({"limits": {"gpu": 2}}, "unknown backend(s) gpu"),
        ({"limits": 2}, "object of backend"),
        ({"chat_limit": 2}, "unknown setting(s) chat_limit"),
        ({}, "nothing to change"),
        ([1], "JSON object"),
        ({"retry_base_seconds": -1}, "retry_base_seconds"),
        ({"expected_version": "1", "max_waiters": 1}, "expected_version"),
        ({"expected_version": 10**30, "max_waiters": 1}, "expected_version"),
        ({"max_waiters": 1, "x\ud800": 1}, "lone UTF-16 surrogate"),
        ({"max_waiters": 1, "x": "a\x00"}, "NUL"),
        ({"max_waiters": 1, "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}, "nested"),
    ],
)
def test_bad_changes_are_400_naming_the_problem_and_change_nothing(client, keys, body, problem) -> None:
    version = concurrency_settings_get().version
    response = patch(client, body)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "bad_request"
    assert problem in response.json()["error"]["message"]
    assert concurrency_settings_get().version == version


def test_a_stale_expected_version_is_409(client, keys) -> None:
    version = concurrency_settings_get().version
    concurrency_settings_update(max_waiters=3)
    response = patch(client, {"max_waiters": 9, "expected_version": version})
    assert response.status_code == 409 and "changed by someone else" in response.json()["error"]["message"]
    assert concurrency_settings_get().max_waiters == 3


def test_a_body_that_is_not_json_is_415(client, keys) -> None:
    assert patch(client, "max_waiters=3", content_type="application/x-www-form-urlencoded").status_code == 415


def test_who_may_read_and_who_may_write(client, keys) -> None:
    assert client.get(URL, headers={"Authorization": f"Bearer {READ_KEY}"}).status_code == 200
    assert client.get(URL, headers={"Authorization": "Bearer shared-read-token"}).status_code == 200
    assert client.get(URL).status_code == 403
    for key in (READ_KEY, "shared-read-token", None):  # the shared token and a read key only read
        response = patch(client, {"max_waiters": 3}, key=key)
        assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"

    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_concurrencysettings"))
    client.force_login(viewer)
    assert client.get(URL).status_code == 200
    assert patch(client, {"max_waiters": 3}, key=None).status_code == 403

    editor = User.objects.create_user("editor", is_staff=True)
    editor.user_permissions.add(Permission.objects.get(codename="change_concurrencysettings"))
    client.force_login(editor)
    assert patch(client, {"max_waiters": 3}, key=None).status_code == 200
    assert concurrency_settings_get().updated_by == editor


def test_a_staff_session_patches_only_with_its_csrf_token(keys) -> None:
    editor = User.objects.create_user("editor", is_staff=True)
    editor.user_permissions.add(Permission.objects.get(codename="change_concurrencysettings"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(editor)
    refused = patch(client, {"max_waiters": 3}, key=None)
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]

    client.get("/admin/")  # sets the csrftoken cookie
    headers = {"X-CSRFToken": client.cookies["csrftoken"].value}
    accepted = client.patch(URL, data=json.dumps({"max_waiters": 3}), content_type="application/json", headers=headers)
    assert accepted.status_code == 200
    assert patch(Client(enforce_csrf_checks=True), {"max_waiters": 4}).status_code == 200  # a key needs none


def test_other_methods_are_405(client, keys) -> None:
    assert client.post(URL, headers={"Authorization": f"Bearer {WRITE_KEY}"}).status_code == 405
