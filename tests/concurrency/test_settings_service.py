"""The settings row: a singleton seeded from the environment, changed only through a validating service."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from concurrency.live import SETTINGS_TOPIC, settings_current
from concurrency.manager import get_manager
from concurrency.models import ConcurrencySettings
from concurrency.selectors import concurrency_settings_get, concurrency_settings_snapshot, concurrency_settings_version
from concurrency.services import concurrency_settings_update
from infra.models import ChangeGeneration
from tests.concurrency.manager_helpers import fresh_process_state

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def process_state() -> Iterator[None]:
    with fresh_process_state():
        yield


def test_first_use_creates_the_single_row_from_the_environment_defaults(settings) -> None:
    settings.LLM_MAX_CONCURRENT_CHAT = 5
    settings.LLM_MAX_CONCURRENT_EMBEDDING = 12
    settings.LLM_PRIORITY_ENABLED = True
    settings.LLM_RPM_LIMIT = 600
    settings.LANGFUSE_SAMPLE_RATE = 0.25
    settings.LLM_REQUEST_TIMEOUT = 90.0

    row = concurrency_settings_get()

    assert row.pk == 1
    assert row.version == 1
    assert row.limits() == {
        "default": settings.LLM_MAX_CONCURRENT_DEFAULT,
        "chat": 5,
        "responses": settings.LLM_MAX_CONCURRENT_RESPONSES,
        "embedding": 12,
    }
    assert row.priority_enabled is True
    assert row.rpm() == {"default": 600, "chat": 600, "responses": 600, "embedding": 600}
    assert row.telemetry_sample_rate == 0.25
    assert row.llm_request_timeout == 90.0
    assert row.acquire_timeout == settings.LLM_ACQUIRE_TIMEOUT
    assert row.retry_max_attempts == settings.LLM_RETRY_MAX_ATTEMPTS


def test_later_uses_return_the_same_row_and_ignore_changed_defaults(settings) -> None:
    first = concurrency_settings_get()
    settings.LLM_MAX_CONCURRENT_CHAT = 99

    again = concurrency_settings_get()

    assert again.pk == first.pk
    assert again.limit_chat == first.limit_chat
    assert ConcurrencySettings.objects.count() == 1


def test_update_saves_bumps_the_version_and_records_the_editor() -> None:
    editor = User.objects.create_user("ops", is_staff=True)
    concurrency_settings_get()

    row = concurrency_settings_update(user=editor, limit_chat=3, priority_enabled=True, telemetry_sample_rate=0.5)

    row.refresh_from_db()
    assert (row.limit_chat, row.priority_enabled, row.telemetry_sample_rate) == (3, True, 0.5)
    assert row.version == 2
    assert row.updated_by == editor
    assert concurrency_settings_version() == 2
    assert concurrency_settings_update(user=editor, limit_chat=4).version == 3


def test_update_without_a_user_records_nobody() -> None:
    assert concurrency_settings_update(user=None, max_waiters=10).updated_by is None


@pytest.mark.parametrize(
    ("fields", "field_in_error"),
    [
        ({"limit_chat": 0}, "limit_chat"),
        ({"limit_default": -1}, "limit_default"),
        ({"limit_embedding": 5000}, "limit_embedding"),
        ({"limit_responses": "many"}, "limit_responses"),
        ({"telemetry_sample_rate": 1.5}, "telemetry_sample_rate"),
        ({"telemetry_sample_rate": -0.1}, "telemetry_sample_rate"),
        ({"telemetry_sample_rate": math.nan}, "telemetry_sample_rate"),
        ({"acquire_timeout": 0}, "acquire_timeout"),
        ({"acquire_timeout": math.inf}, "acquire_timeout"),
        ({"llm_request_timeout": 0.0}, "llm_request_timeout"),
        ({"starvation_threshold": -1}, "starvation_threshold"),
        ({"max_waiters": -5}, "max_waiters"),
        ({"retry_max_attempts": 0}, "retry_max_attempts"),
        ({"retry_base_seconds": 10, "retry_max_seconds": 5}, "retry_max_seconds"),
        ({"rpm_chat": -1}, "rpm_chat"),
    ],
)
def test_invalid_values_are_refused_with_the_field_named_and_nothing_changes(fields, field_in_error) -> None:
    before = concurrency_settings_get()

    with pytest.raises(ValidationError) as caught:
        concurrency_settings_update(user=None, **fields)

    assert field_in_error in caught.value.message_dict
    after = concurrency_settings_get()
    assert after.version == before.version
    assert concurrency_settings_snapshot() == concurrency_settings_snapshot()
    assert after.limits() == before.limits()


def test_clear_messages_for_the_rules_the_validators_cannot_express() -> None:
    with pytest.raises(ValidationError) as caught:
        concurrency_settings_update(user=None, acquire_timeout=0, retry_base_seconds=10, retry_max_seconds=5)

    assert caught.value.message_dict["acquire_timeout"] == ["Must be more than 0 seconds."]
    assert caught.value.message_dict["retry_max_seconds"] == ["The max backoff must be at least the base backoff."]


def test_unknown_or_read_only_fields_are_a_programming_error() -> None:
    with pytest.raises(TypeError, match="version"):
        concurrency_settings_update(user=None, version=10)
    with pytest.raises(TypeError, match="limit_gpu"):
        concurrency_settings_update(user=None, limit_gpu=1)


def test_a_stale_edit_is_refused_instead_of_undoing_a_newer_change() -> None:
    concurrency_settings_get()
    concurrency_settings_update(user=None, limit_chat=6)  # someone else: now version 2

    with pytest.raises(ValidationError, match="changed by someone else"):
        concurrency_settings_update(user=None, expected_version=1, limit_chat=2)

    assert concurrency_settings_get().limit_chat == 6
    assert concurrency_settings_update(user=None, expected_version=2, limit_chat=2).version == 3


def test_after_commit_the_change_reaches_this_process_manager(django_capture_on_commit_callbacks) -> None:
    manager = get_manager()
    concurrency_settings_get()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        concurrency_settings_update(
            user=None, limit_chat=3, limit_embedding=20, priority_enabled=True, starvation_threshold=4, max_waiters=7
        )

    assert len(callbacks) == 2  # applied here at once, and published to every worker through the change feed
    assert ChangeGeneration.objects.get(topic=SETTINGS_TOPIC).generation == 1
    assert manager.limit("chat") == 3
    assert manager.limit("embedding") == 20
    assert manager.mode == "priority"
    assert manager.starvation_threshold == 4.0
    assert manager.max_waiters == 7
    assert (current := settings_current()) is not None and current.version == 2


def test_nothing_is_applied_when_the_transaction_rolls_back(django_capture_on_commit_callbacks) -> None:
    manager = get_manager()
    concurrency_settings_get()
    limit_before = manager.limit("chat")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        concurrency_settings_update(user=None, limit_chat=limit_before + 1)

    # Callbacks registered but not run: as after a rollback, the manager is untouched and nothing is published.
    assert len(callbacks) == 2
    assert manager.limit("chat") == limit_before
    assert not ChangeGeneration.objects.filter(topic=SETTINGS_TOPIC).exists()
