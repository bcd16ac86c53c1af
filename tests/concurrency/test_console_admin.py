"""The concurrency console in the admin: staff only, live stats, and the settings form applied at once."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from concurrency.manager import get_manager
from concurrency.models import EDITABLE_FIELDS
from concurrency.selectors import concurrency_settings_defaults, concurrency_settings_get
from tests.concurrency.manager_helpers import fresh_process_state

CONSOLE = "/admin/concurrency/concurrencysettings/console/"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.concurrency.urls")]


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    """The admin speaks the browser's language, zh-hant when it names none: these tests read it in English."""
    settings.LANGUAGE_CODE = "en"


@pytest.fixture(autouse=True)
def process_state(settings) -> Iterator[None]:
    settings.REDIS_URL = ""
    with fresh_process_state():
        yield


@pytest.fixture
def admin_user(client) -> User:
    boss = User.objects.create_superuser("boss", "boss@example.com", "pw")
    client.force_login(boss)
    return boss


def form_data(**changes) -> dict:
    row = concurrency_settings_get()
    data = {name: getattr(row, name) for name in EDITABLE_FIELDS}
    data["expected_version"] = row.version
    data.update(changes)
    if not data["priority_enabled"]:
        del data["priority_enabled"]  # an unchecked checkbox is not posted
    return data


def test_anonymous_visitors_are_sent_to_the_login_page(client) -> None:
    response = client.get(CONSOLE)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_non_staff_users_are_sent_to_the_login_page(client) -> None:
    client.force_login(User.objects.create_user("visitor", password="pw"))

    assert client.get(CONSOLE).status_code == 302
    assert client.post(CONSOLE, form_data(limit_chat=1)).status_code == 302
    assert concurrency_settings_get().version == 1


def test_the_console_renders_backends_stats_and_the_form_for_staff(client, admin_user) -> None:
    response = client.get(CONSOLE)

    assert response.status_code == 200
    assert "admin/concurrency/console.html" in [t.name for t in response.templates]
    html = response.content.decode()
    for backend in ("default", "chat", "responses", "embedding"):
        assert f'data-backend="{backend}"' in html
    for name in EDITABLE_FIELDS:
        assert f'name="{name}"' in html
    assert 'name="expected_version"' in html
    assert "concurrency/console.js" in html
    assert 'id="concurrency-initial-status"' in html
    assert 'data-status-url="/api/v1/admin/concurrency/status"' in html
    assert 'id="site-name"' in html  # extends the admin's base_site


def test_the_admin_index_leads_to_the_console(client, admin_user) -> None:
    index = client.get("/admin/").content.decode()
    assert "/admin/concurrency/concurrencysettings/" in index

    for url in ("/admin/concurrency/concurrencysettings/", "/admin/concurrency/concurrencysettings/1/change/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"] == CONSOLE
    assert client.get("/admin/concurrency/concurrencysettings/add/").status_code in (302, 403)


def test_saving_the_form_applies_the_change_in_this_process(client, admin_user) -> None:
    response = client.post(
        CONSOLE, form_data(limit_chat=3, priority_enabled=True, starvation_threshold=4, telemetry_sample_rate=0.2)
    )

    assert response.status_code == 302
    assert response["Location"] == CONSOLE
    row = concurrency_settings_get()
    assert (row.limit_chat, row.priority_enabled, row.telemetry_sample_rate, row.version) == (3, True, 0.2, 2)
    assert row.updated_by == admin_user
    manager = get_manager()
    assert manager.limit("chat") == 3
    assert manager.mode == "priority"
    assert manager.starvation_threshold == 4.0
    page = client.get(CONSOLE).content.decode()
    assert "Saved version 2" in page


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"limit_chat": 0}, "limit_chat"),
        ({"telemetry_sample_rate": 2}, "telemetry_sample_rate"),
        ({"acquire_timeout": 0}, "acquire_timeout"),
        ({"llm_request_timeout": -1}, "llm_request_timeout"),
        ({"limit_default": "eight"}, "limit_default"),
        ({"retry_base_seconds": 30, "retry_max_seconds": 2}, "retry_max_seconds"),
        ({"max_waiters": ""}, "max_waiters"),
    ],
)
def test_invalid_values_re_render_with_form_errors_and_change_nothing(client, admin_user, changes, field) -> None:
    manager_limit = get_manager().limit("chat")

    response = client.post(CONSOLE, form_data(**changes))

    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert f'id="id_{field}_error"' in response.content.decode()
    assert concurrency_settings_get().version == 1
    assert get_manager().limit("chat") == manager_limit


def test_a_form_loaded_before_someone_elses_save_is_refused(client, admin_user) -> None:
    stale = form_data(limit_chat=2)
    client.post(CONSOLE, form_data(limit_chat=5))

    response = client.post(CONSOLE, stale)

    assert response.status_code == 200
    assert "changed by someone else" in response.content.decode()
    assert concurrency_settings_get().limit_chat == 5


def test_staff_without_the_change_permission_may_look_but_not_save(client) -> None:
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_concurrencysettings"))
    client.force_login(viewer)

    page = client.get(CONSOLE)
    assert page.status_code == 200
    assert "disabled" in str(page.context["form"]["limit_chat"])
    assert "Save and apply" not in page.content.decode()
    assert client.post(CONSOLE, form_data(limit_chat=1)).status_code == 403
    assert concurrency_settings_get().limit_chat == concurrency_settings_defaults()["limit_chat"]


def test_the_console_counts_degraded_answers(client, admin_user) -> None:
    from concurrency.live import register_stats_provider

    unregister = register_stats_provider("answers", lambda: {"degraded": 3})
    try:
        html = client.get(CONSOLE).content.decode()
    finally:
        unregister()
    assert '<strong data-cc="degraded">3</strong>' in html


def test_the_console_counts_skipped_auxiliary_calls_per_kind(client, admin_user) -> None:
    html = client.get(CONSOLE).content.decode()
    assert '<strong data-cc="skipped">none</strong>' in html
    get_manager().auxiliary_skipped("planner")
    get_manager().auxiliary_skipped("summary")
    html = client.get(CONSOLE).content.decode()
    assert '<strong data-cc="skipped">planner 1, summary 1</strong>' in html


@pytest.mark.parametrize(
    ("language", "live", "mode"), [("en", "live · {time}", "priority"), ("zh-hant", "即時 · {time}", "優先")]
)
def test_the_console_carries_its_scripts_words_in_the_admin_language(
    client, admin_user, language: str, live: str, mode: str
) -> None:
    page = client.get(CONSOLE, HTTP_ACCEPT_LANGUAGE=language)
    carried = re.search(r'id="concurrency-console-words"[^>]*>(.*?)</script>', page.content.decode())
    assert carried, "the page carries no words for its script"
    words = json.loads(carried.group(1))
    assert words["live · {time}"] == live
    assert words["mode priority"] == mode
    assert words["{seconds} s ago"].count("{seconds}") == 1
