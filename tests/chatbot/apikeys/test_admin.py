"""API keys in the admin: the secret on the page after the add form and nowhere else; list; revoke."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from chatbot.apikeys.models import ApiKey
from chatbot.apikeys.selectors import api_key_hash
from chatbot.apikeys.services import api_key_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    """The admin speaks the browser's language, zh-hant when it names none: these tests read it in English."""
    settings.LANGUAGE_CODE = "en"


def test_adding_a_key_shows_its_secret_once(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/apikeys/apikey/add/",
        {"name": "Open WebUI", "scopes": ["chat", "admin-read"], "rate_limit_per_minute": "120", "expires_at": ""},
    )
    assert response.status_code == 200, response.content[:2000]
    assert "no-store" in response["Cache-Control"]  # a secret must not stay in a cache
    match = re.search(r'<code id="api-key-secret"[^>]*>([^<]+)</code>', response.content.decode())
    assert match
    secret = match.group(1)
    row = ApiKey.objects.get()
    assert row.key_hash == api_key_hash(secret)
    assert (row.scopes, row.rate_limit_per_minute, row.owner) == (
        ["chat", "admin-read"],
        120,
        response.wsgi_request.user,
    )

    change = admin_client.get(f"/admin/apikeys/apikey/{row.pk}/change/").content.decode()
    listing = admin_client.get("/admin/apikeys/apikey/").content.decode()
    assert row.prefix in listing and "active" in listing
    assert secret not in change and secret not in listing


def test_a_key_needs_a_scope(admin_client: Client) -> None:
    response = admin_client.post("/admin/apikeys/apikey/add/", {"name": "none", "rate_limit_per_minute": "1"})
    assert response.status_code == 200
    assert "scopes" in response.context["adminform"].form.errors
    assert not ApiKey.objects.exists()


def test_the_revoke_action(admin_client: Client) -> None:
    key = api_key_create(name="old", scopes=["chat"]).key
    response = admin_client.post(
        "/admin/apikeys/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True
    )
    assert "1 key revoked." in response.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert "revoked" in admin_client.get("/admin/apikeys/apikey/").content.decode()
