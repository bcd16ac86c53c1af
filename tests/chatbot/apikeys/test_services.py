"""Making, checking, limiting and revoking API keys."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from chatbot.apikeys.models import ApiKey
from chatbot.apikeys.selectors import KeyRefused, api_key_check, api_key_hash, bearer_secret
from chatbot.apikeys.services import (
    RateLimited,
    api_key_allows_scope,
    api_key_authorise,
    api_key_create,
    api_key_rate_check,
    api_key_revoke,
    api_key_tokens_add,
)

pytestmark = pytest.mark.django_db


def test_a_key_is_stored_hashed_with_a_prefix_to_recognise_it() -> None:
    created = api_key_create(name="Open WebUI", scopes=["chat", "admin-read"])
    row = ApiKey.objects.get()
    assert created.secret.startswith("hc-") and len(created.secret) > 40
    assert row.prefix == created.secret[:11]
    assert row.key_hash == api_key_hash(created.secret) and created.secret not in row.key_hash
    assert row.scopes == ["chat", "admin-read"]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"name": " "}, "needs a name"),
        ({"scopes": ["chat", "root"]}, "unknown scope(s) root"),
        ({"scopes": []}, "at least one scope"),
        ({"rate_limit_per_minute": -1}, "rate_limit_per_minute"),
        ({"expires_at": timezone.now() - timedelta(seconds=1)}, "in the past"),
    ],
)
def test_bad_key_options_are_refused_naming_the_problem(options: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        api_key_create(**{"name": "k", **options})
    assert not ApiKey.objects.exists()


def test_the_check_refuses_what_the_key_does_not_allow() -> None:
    chat = api_key_create(name="chat", scopes=["chat"]).secret
    expiring = api_key_create(name="soon", scopes=["chat"], expires_at=timezone.now() + timedelta(hours=1))
    assert api_key_check(secret=chat, scope="chat").prefix == chat[:11]

    def refusal(secret: str, scope: str = "chat") -> tuple[int, str]:
        with pytest.raises(KeyRefused) as refused:
            api_key_check(secret=secret, scope=scope)
        return refused.value.status, refused.value.code

    assert refusal("") == (401, "missing_api_key")
    assert refusal(chat + "x") == (401, "invalid_api_key")
    assert refusal(chat, "admin-write") == (403, "insufficient_scope")
    ApiKey.objects.filter(pk=expiring.key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert refusal(expiring.secret) == (401, "invalid_api_key")
    api_key_revoke(prefix=chat[:11])
    assert refusal(chat) == (401, "invalid_api_key")


@pytest.mark.parametrize(
    ("header", "secret"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", ""), ("", ""), ("Bearer", "")],
)
def test_bearer_secret(header: str, secret: str) -> None:
    assert bearer_secret(header) == secret


def test_the_rate_limit_counts_per_key_per_minute_and_says_when_to_come_back() -> None:
    cache.clear()
    created = api_key_create(name="limited", scopes=["chat"], rate_limit_per_minute=2)
    key = api_key_check(secret=created.secret, scope="chat")
    api_key_rate_check(key, now=600.0)
    api_key_rate_check(key, now=630.0)
    with pytest.raises(RateLimited) as limited:
        api_key_rate_check(key, now=645.5)
    assert limited.value.retry_after == 15  # the next minute starts at 660
    api_key_rate_check(key, now=660.0)  # a new minute


def test_authorising_counts_the_request_and_tokens_are_added_after_the_answer() -> None:
    cache.clear()
    created = api_key_create(name="counted", scopes=["chat", "admin-read"], rate_limit_per_minute=0)
    api_key_authorise(authorization=f"Bearer {created.secret}", scope="chat")
    assert api_key_allows_scope(authorization=f"Bearer {created.secret}", scope="admin-read")
    assert not api_key_allows_scope(authorization=f"Bearer {created.secret}", scope="admin-write")
    api_key_tokens_add(key_id=created.key.pk, tokens=120)
    row = ApiKey.objects.get()
    assert (row.requests, row.tokens) == (2, 120) and row.last_used_at is not None
    # an answer whose LLM server reported no usage: counted all the same, and marked as estimated
    api_key_tokens_add(key_id=created.key.pk, tokens=30, estimated=True)
    row.refresh_from_db()
    assert (row.tokens, row.estimated_tokens) == (150, 30)


def test_revoking_an_unknown_prefix_says_so() -> None:
    with pytest.raises(LookupError, match="hc-nothing"):
        api_key_revoke(prefix="hc-nothing")


@pytest.mark.urls("chatbot.urls")
def test_keys_with_the_admin_scopes_open_the_concurrency_apis(client) -> None:
    reader = api_key_create(name="dashboards", scopes=["admin-read"]).secret
    writer = api_key_create(name="ops scripts", scopes=["admin-write"]).secret
    chat = api_key_create(name="chat only", scopes=["chat"]).secret

    def status(secret: str) -> int:
        return client.get("/api/v1/admin/concurrency/status", headers={"Authorization": f"Bearer {secret}"}).status_code

    def patch(secret: str) -> int:
        return client.patch(
            "/api/v1/admin/concurrency/settings",
            data='{"max_waiters": 5}',
            content_type="application/json",
            headers={"Authorization": f"Bearer {secret}"},
        ).status_code

    assert (status(reader), status(chat)) == (200, 403)
    assert (
        client.get("/api/v1/admin/concurrency/status", headers={"Authorization": f"Bearer {reader}"}).json()["chat"][
            "in_progress"
        ]
        == 0
    )
    assert (patch(reader), patch(chat), patch(writer)) == (403, 403, 200)
    api_key_revoke(prefix=reader[:11])
    assert status(reader) == 403
    assert ApiKey.objects.get(name="dashboards").requests == 2
