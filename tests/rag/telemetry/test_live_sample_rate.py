"""The telemetry sample rate edited in the concurrency console reaches the sampler of the running process."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from concurrency.live import SettingsSnapshot, settings_apply, settings_forget
from concurrency.manager import reset_manager
from concurrency.services import concurrency_settings_update
from rag.telemetry import current_telemetry, get_telemetry, reset_telemetry
from rag.wiring import get_runtime, reset_runtime, telemetry_for_deps, warm_up
from tests.concurrency.test_console_admin import CONSOLE, form_data
from tests.rag.telemetry.test_sampler import request_ids


@pytest.fixture
def process(settings: Any, private_index: str) -> Iterator[Any]:
    """This process as a server: no live row applied yet, no runtime, telemetry (off: no keys) at the env's
    rate, a store of the test's own."""
    settings.LANGFUSE_PUBLIC_KEY = settings.LANGFUSE_SECRET_KEY = ""
    settings.LANGFUSE_SAMPLE_RATE = 1.0
    settings.REDIS_URL = ""
    reset_runtime()
    reset_telemetry()
    settings_forget()
    reset_manager()
    yield settings
    reset_runtime()
    reset_telemetry()
    settings_forget()
    reset_manager()


def snapshot(version: int, rate: float) -> SettingsSnapshot:
    return SettingsSnapshot(
        version=version,
        limits={"default": 8, "chat": 8, "responses": 8, "embedding": 16},
        priority_enabled=False,
        starvation_threshold=10.0,
        acquire_timeout=30.0,
        max_waiters=200,
        telemetry_sample_rate=rate,
    )


def sampled_share(n: int, offset: int = 0) -> float:
    sampler = get_telemetry().sampler
    return sum(sampler.check(request_id) for request_id in request_ids(offset + n)[offset:]) / n


def test_an_applied_snapshot_sets_the_running_samplers_rate(process: Any) -> None:
    get_runtime()
    telemetry = telemetry_for_deps()
    assert sampled_share(1_000) == 1.0

    assert settings_apply(snapshot(2, 0.1))

    stats = telemetry.sampler.stats()
    assert stats.sample_rate == 0.1
    n = 10_000
    share = sampled_share(n, offset=1_000)
    assert abs(share - 0.1) <= 3 * math.sqrt(0.1 * 0.9 / n)
    assert telemetry.sampler.stats().total_checks == 1_000 + n  # the counters went on counting


def test_a_snapshot_with_a_bad_rate_leaves_the_rate_as_it_was(process: Any) -> None:
    get_runtime()
    telemetry = telemetry_for_deps()
    settings_apply(snapshot(2, 0.4))

    settings_apply(snapshot(3, 7.0))  # only a hand-edited database could hold it

    assert telemetry.sampler.sample_rate == 0.4


def test_a_row_applied_before_the_telemetry_was_built_wins_over_the_environment(process: Any) -> None:
    get_runtime()
    settings_apply(snapshot(2, 0.25))
    assert current_telemetry() is None  # nothing to change yet: the callback must not build it on the loop

    assert telemetry_for_deps().sampler.sample_rate == 0.25


def test_after_the_runtime_is_reset_the_old_callback_is_gone(process: Any) -> None:
    get_runtime()
    telemetry = telemetry_for_deps()
    reset_runtime()

    settings_apply(snapshot(2, 0.5))

    assert telemetry.sampler.sample_rate == 1.0


@pytest.mark.django_db(transaction=True)
def test_server_start_up_reads_the_stored_rate_before_any_live_apply(process: Any) -> None:
    concurrency_settings_update(user=None, telemetry_sample_rate=0.2)
    settings_forget()  # as in a new process: the row is stored, nothing applied yet

    warm_up()

    assert get_telemetry().sampler.sample_rate == 0.2


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.concurrency.urls")
def test_a_rate_saved_in_the_concurrency_console_reaches_the_sampler(process: Any, client: Any) -> None:
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    get_runtime()
    telemetry = telemetry_for_deps()

    response = client.post(CONSOLE, form_data(telemetry_sample_rate=0.3))

    assert response.status_code == 302
    assert telemetry.sampler.stats().sample_rate == 0.3
    assert (
        client.get("/api/v1/admin/concurrency/status").json()["worker"]["extra"]["telemetry_sampler"]["sampler"][
            "sample_rate"
        ]
        == 0.3
    )
