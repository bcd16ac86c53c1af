"""The one access check of the staff JSON APIs (`infra.access`): every credential against every rule.

The entry points each have a thin test that they use it (tests/concurrency/test_api_access.py,
tests/rag/documents/test_api.py, tests/rag/workflows/test_access.py). API keys are the project's own, checked
by the keys app that registered its check when Django started.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import _get_new_csrf_string
from django.test import RequestFactory

from chatbot.apikeys.services import api_key_create
from infra.access import (
    CSRF_REFUSAL,
    SCOPE_READ,
    SCOPE_WRITE,
    Policy,
    Rule,
    access_refusal,
    bearer_token_matches,
    is_staff,
    staff_api,
)

TOKEN = "s3cret-token-for-scripts"
PERMISSION = "concurrency.change_concurrencysettings"
POLICY = Policy(
    read=Rule(refusal="may not read", token=True, key_scope=SCOPE_READ),
    write=Rule(refusal="may not write", key_scope=SCOPE_WRITE, permission=PERMISSION),
)


# ------------------------------------------------------------------------------------------ the pure parts


def someone(*, staff: bool, active: bool = True) -> SimpleNamespace:
    return SimpleNamespace(is_staff=staff, is_active=active, is_authenticated=True)


@pytest.mark.parametrize(
    ("who", "staff"),
    [
        (someone(staff=True), True),
        (someone(staff=True, active=False), False),
        (someone(staff=False), False),
        (AnonymousUser(), False),
        (None, False),
    ],
)
def test_is_staff(who, staff) -> None:
    assert is_staff(who) is staff


@pytest.mark.parametrize(
    ("authorization", "token", "matches"),
    [
        (f"Bearer {TOKEN}", TOKEN, True),
        (f"bearer {TOKEN}", TOKEN, True),
        (f"  Bearer   {TOKEN}  ", TOKEN, True),
        (f"Bearer {TOKEN}x", TOKEN, False),
        (f"Bearer {TOKEN[:-1]}", TOKEN, False),
        (f"Token {TOKEN}", TOKEN, False),
        (TOKEN, TOKEN, False),
        ("Bearer", TOKEN, False),
        ("Bearer ", TOKEN, False),
        ("Bearer ", "", False),  # an empty setting never matches an empty token
        ("Bearer anything", "", False),
        ("Bearer pässwörd", TOKEN, False),  # non-ASCII must not raise
    ],
)
def test_bearer_token_matches(authorization, token, matches) -> None:
    assert bearer_token_matches(authorization, token) is matches


# ------------------------------------------------------------------------------------------ every credential


def request_as(method: str, *, user=None, authorization: str = "", csrf: bool = False) -> HttpRequest:
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    request = getattr(RequestFactory(), method.lower())("/api", **headers)
    if csrf:
        secret = _get_new_csrf_string()
        request.COOKIES["csrftoken"] = secret
        request.META["HTTP_X_CSRFTOKEN"] = secret
    request.user = user if user is not None else AnonymousUser()
    return request


def outcome(request: HttpRequest, policy: Policy = POLICY) -> str:
    refusal = access_refusal(request, policy)
    if refusal is None:
        return "allowed"
    assert refusal.status_code == 403 and refusal["Content-Type"] == "application/json"
    error = json.loads(refusal.content)["error"]
    assert error["code"] == "forbidden"
    return str(error["message"])


@pytest.fixture
def staff() -> User:
    return User.objects.create_user("staff", is_staff=True)


@pytest.fixture
def staff_who_may_change() -> User:
    user = User.objects.create_user("operator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_concurrencysettings"))
    return User.objects.get(pk=user.pk)  # a fresh object: permissions are cached on the instance


@pytest.fixture
def keys() -> dict[str, str]:
    return {scope: "Bearer " + api_key_create(name=scope, scopes=[scope]).secret for scope in (SCOPE_READ, SCOPE_WRITE)}


@pytest.mark.django_db
def test_anonymous_callers_are_refused_reading_and_writing() -> None:
    assert outcome(request_as("GET")) == "may not read"
    assert outcome(request_as("PATCH", csrf=True)) == "may not write"


@pytest.mark.django_db
def test_signed_in_users_who_are_not_staff_are_refused() -> None:
    member = User.objects.create_user("member")
    assert outcome(request_as("GET", user=member)) == "may not read"
    assert outcome(request_as("PATCH", user=member, csrf=True)) == "may not write"


@pytest.mark.django_db
def test_staff_read_without_csrf_but_write_only_with_it(staff_who_may_change) -> None:
    assert outcome(request_as("GET", user=staff_who_may_change)) == "allowed"
    assert outcome(request_as("PATCH", user=staff_who_may_change)) == CSRF_REFUSAL
    assert outcome(request_as("PATCH", user=staff_who_may_change, csrf=True)) == "allowed"


@pytest.mark.django_db
def test_staff_write_only_with_the_rules_permission(staff) -> None:
    assert outcome(request_as("PATCH", user=staff, csrf=True)) == f"you lack the permission '{PERMISSION}'"
    assert outcome(request_as("PATCH", user=staff, csrf=True), Policy(read=POLICY.read)) == "allowed"


@pytest.mark.django_db
def test_an_api_key_opens_only_the_rules_scope_and_needs_no_csrf(keys) -> None:
    assert outcome(request_as("GET", authorization=keys[SCOPE_READ])) == "allowed"
    assert outcome(request_as("PATCH", authorization=keys[SCOPE_READ])) == "may not write"
    assert outcome(request_as("PATCH", authorization=keys[SCOPE_WRITE])) == "allowed"
    assert outcome(request_as("GET", authorization=keys[SCOPE_WRITE])) == "may not read"
    assert outcome(request_as("GET", authorization="Bearer sk-not-a-key")) == "may not read"
    no_keys = Policy(read=Rule(refusal="sessions only"))
    assert outcome(request_as("GET", authorization=keys[SCOPE_READ]), no_keys) == "sessions only"


@pytest.mark.django_db
def test_the_shared_token_opens_only_rules_that_take_it(settings) -> None:
    settings.CONCURRENCY_API_TOKEN = TOKEN
    assert outcome(request_as("GET", authorization=f"Bearer {TOKEN}")) == "allowed"
    assert outcome(request_as("PATCH", authorization=f"Bearer {TOKEN}")) == "may not write"
    assert outcome(request_as("GET", authorization="Bearer wrong")) == "may not read"
    settings.CONCURRENCY_API_TOKEN = ""
    assert outcome(request_as("GET", authorization="Bearer ")) == "may not read"


# ------------------------------------------------------------------------------------------ the decorator


@pytest.mark.django_db
def test_the_decorator_refuses_before_the_view_and_lets_callers_in(staff) -> None:
    called: list[str] = []

    @staff_api(Policy(read=Rule(refusal="no")))
    def view(request: HttpRequest) -> HttpResponse:
        called.append(request.method or "")
        return HttpResponse("ok")

    assert view(request_as("GET")).status_code == 403 and called == []
    assert view(request_as("GET", user=staff)).status_code == 200 and called == ["GET"]
    assert view.csrf_exempt is True  # the check does CSRF itself, answering in JSON


@pytest.mark.django_db(transaction=True)
async def test_the_decorator_checks_async_views_off_the_event_loop(staff) -> None:
    @staff_api(Policy(read=Rule(refusal="no")))
    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    assert (await view(request_as("GET"))).status_code == 403
    assert (await view(request_as("POST", user=staff))).status_code == 403  # no CSRF token
    assert (await view(request_as("POST", user=staff, csrf=True))).status_code == 200
