"""The publish test set and its runs in the admin: a run's page shows, per test, the draft's verdict beside
production's with what each answer missed, regressions marked, in the admin's language."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from rag.workflows import services
from rag.workflows.models import PublishCheck, PublishTest

pytestmark = pytest.mark.django_db

RESULTS = [
    {
        "test_id": 1,
        "question": "How do I reset my <b>password</b>?",
        "draft_passed": False,
        "draft_missing": ["Forgot password", "source en-password-reset"],
        "production_passed": True,
        "production_missing": [],
    },
    {
        "test_id": 2,
        "question": "如何重設密碼？",
        "draft_passed": True,
        "draft_missing": [],
        "production_passed": True,
        "production_missing": [],
    },
]


@pytest.fixture
def check() -> PublishCheck:
    draft = services.workflow_draft_create(name="draft")
    return PublishCheck.objects.create(
        draft=draft, version=1, backend="chat", results=RESULTS, passed=1, failed=1, regressions=1
    )


def test_a_checks_page_shows_the_results_beside_production(admin_client: Client, check: PublishCheck) -> None:
    page = admin_client.get(f"/admin/rag_workflows/publishcheck/{check.pk}/change/", HTTP_ACCEPT_LANGUAGE="en")
    html = page.content.decode()
    assert page.status_code == 200
    rows = re.findall(r"<tr( class=\"regression\"[^>]*)?>\s*<td>(.*?)</td>", html)
    assert [(bool(marked), question) for marked, question in rows] == [
        (True, "How do I reset my &lt;b&gt;password&lt;/b&gt;?"),  # a question is text, never markup
        (False, "如何重設密碼？"),
    ]
    assert "missing: Forgot password, source en-password-reset" in html


def test_the_results_are_in_the_admins_language(admin_client: Client, check: PublishCheck) -> None:
    html = admin_client.get(
        f"/admin/rag_workflows/publishcheck/{check.pk}/change/", HTTP_ACCEPT_LANGUAGE="zh-hant"
    ).content.decode()
    assert "缺少： Forgot password" in html and '<th scope="col">正式版</th>' in html


def test_the_test_list_shows_what_each_test_requires(admin_client: Client) -> None:
    PublishTest.objects.create(question="How long is the link valid?", must_contain=["30"], must_cite=["en-reset"])
    html = admin_client.get("/admin/rag_workflows/publishtest/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<td class="field-facts">30</td>' in html and '<td class="field-sources">en-reset</td>' in html
