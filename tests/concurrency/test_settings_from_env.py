"""The environment's limits against the saved settings row: the saved row wins, and a difference is said at
start-up and in the console; `manage.py concurrency_settings --from-env` applies the environment's values live."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from concurrency.live import settings_apply, settings_current
from concurrency.manager import get_manager
from concurrency.selectors import (
    ENVIRONMENT_VARIABLES,
    concurrency_settings_env_differences,
    concurrency_settings_get,
    concurrency_settings_snapshot,
)
from rag.wiring import warn_environment_differences
from tests.concurrency.manager_helpers import fresh_process_state

CONSOLE = "/admin/concurrency/concurrencysettings/console/"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.concurrency.urls")]


@pytest.fixture(autouse=True)
def process_state(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    settings.REDIS_URL = ""
    settings.LANGUAGE_CODE = "en"
    for variables in ENVIRONMENT_VARIABLES.values():
        for name in variables:
            monkeypatch.delenv(name, raising=False)
    with fresh_process_state():
        yield


@pytest.fixture
def chat_limit_changed(settings: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """The row saved with the deployment's first limits, then the environment changed (a redeploy)."""
    saved = concurrency_settings_get().limit_chat
    monkeypatch.setenv("LLM_MAX_CONCURRENT_CHAT", "2")
    settings.LLM_MAX_CONCURRENT_CHAT = 2
    assert saved != 2
    return saved


def test_only_variables_the_environment_sets_are_compared(chat_limit_changed: int, settings: Any) -> None:
    settings.LLM_MAX_CONCURRENT_EMBEDDING = 99  # a built-in default moved, no variable set: says nothing
    [difference] = concurrency_settings_env_differences(snapshot=concurrency_settings_snapshot())
    assert (difference.field, difference.variable, difference.environment, difference.saved) == (
        "limit_chat",
        "LLM_MAX_CONCURRENT_CHAT",
        2,
        chat_limit_changed,
    )


def test_start_up_says_the_saved_settings_win(chat_limit_changed: int, caplog: pytest.LogCaptureFixture) -> None:
    settings_apply(concurrency_settings_snapshot())  # what start-up does before it compares
    with caplog.at_level(logging.WARNING, logger="rag.wiring"):
        warn_environment_differences()
    assert f"LLM_MAX_CONCURRENT_CHAT=2 (saved: {chat_limit_changed})" in caplog.text
    assert "concurrency_settings --from-env" in caplog.text


def test_nothing_is_said_when_they_agree(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_MAX_CONCURRENT_CHAT", str(concurrency_settings_get().limit_chat))
    settings_apply(concurrency_settings_snapshot())
    with caplog.at_level(logging.WARNING, logger="rag.wiring"):
        warn_environment_differences()
    assert not [r for r in caplog.records if r.name == "rag.wiring"]


def test_the_command_applies_the_environment_live(chat_limit_changed: int) -> None:
    settings_apply(concurrency_settings_snapshot())
    out = StringIO()
    call_command("concurrency_settings", stdout=out)
    assert f"LLM_MAX_CONCURRENT_CHAT=2 (saved: {chat_limit_changed}) -- the saved value wins" in out.getvalue()

    call_command("concurrency_settings", "--from-env", "--dry-run", stdout=StringIO())
    assert concurrency_settings_get().version == 1

    out = StringIO()
    call_command("concurrency_settings", "--from-env", stdout=out)
    assert f"limit_chat: {chat_limit_changed} -> 2 (LLM_MAX_CONCURRENT_CHAT)" in out.getvalue()
    row = concurrency_settings_get()
    assert (row.limit_chat, row.version) == (2, 2)
    # through the settings service: applied in this process (and broadcast to the others) on commit
    applied = settings_current()
    assert applied is not None and applied.version == 2
    assert get_manager().limit("chat") == 2
    assert concurrency_settings_env_differences(snapshot=concurrency_settings_snapshot()) == []


def test_the_console_shows_the_difference(client: Any, chat_limit_changed: int) -> None:
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    page = client.get(CONSOLE).content.decode()
    assert "<code>LLM_MAX_CONCURRENT_CHAT=2</code>" in page
    assert f"saved: {chat_limit_changed}" in page
    assert "manage.py concurrency_settings --from-env" in page
    status = client.get("/api/v1/admin/concurrency/status").json()
    assert status["settings"]["environment_differences"] == [
        {"field": "limit_chat", "variable": "LLM_MAX_CONCURRENT_CHAT", "environment": 2, "saved": chat_limit_changed}
    ]
