"""`manage.py apikey create|list|revoke`."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from chatbot.apikeys.models import ApiKey
from chatbot.apikeys.selectors import api_key_hash

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("apikey", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_prints_the_key_once_list_shows_it_and_revoke_stops_it() -> None:
    User.objects.create_user("alice")
    secret, note = run("create", "--name", "Open WebUI", "--owner", "alice", "--scopes", "chat,admin-read")
    secret = secret.strip()
    row = ApiKey.objects.get()
    assert row.key_hash == api_key_hash(secret) and row.owner is not None and row.owner.username == "alice"
    assert "shown once" in note and row.prefix in note

    listing, _ = run("list")
    assert row.prefix in listing and "Open WebUI" in listing and "chat,admin-read" in listing
    assert secret not in listing and "never used" in listing

    revoked, _ = run("revoke", row.prefix)
    assert f"revoked {row.prefix}" in revoked
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert row.prefix not in run("list", "--active")[0]


def test_create_with_an_expiry() -> None:
    run("create", "--name", "temp", "--expires-in-days", "1")
    assert ApiKey.objects.get().expires_at is not None
    with pytest.raises(CommandError, match="time zone"):
        run("create", "--name", "naive", "--expires", "2030-01-01T00:00:00")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("create", "--name", "x", "--scopes", "sudo"), "unknown scope"),
        (("create", "--name", "x", "--owner", "nobody"), "no user named"),
        (("revoke", "hc-unknown"), "no API key with prefix"),
    ],
)
def test_mistakes_are_command_errors(args: tuple[str, ...], problem: str) -> None:
    with pytest.raises(CommandError, match=problem):
        run(*args)
