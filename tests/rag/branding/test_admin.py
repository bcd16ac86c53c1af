"""The admin home says the demo is loaded and removes it in one click; the words are edited on one page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from rag.branding.memory import memory
from rag.branding.models import DemoState
from rag.branding.selectors import organisation_get
from rag.branding.services import demo_load
from rag.documents.models import IndexJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def own_corpus(settings, tmp_path: Path) -> Iterator[Path]:
    settings.CORPUS_DIR = tmp_path
    memory.drop()
    yield tmp_path
    memory.drop()


def test_the_admin_home_offers_to_remove_a_loaded_demo_and_removing_it_says_what_happens(
    admin_client: Client, own_corpus: Path
) -> None:
    assert (
        "The demo organisation is loaded."
        not in admin_client.get("/admin/", headers={"Accept-Language": "en"}).content.decode()
    )
    demo_load()
    home = admin_client.get("/admin/", headers={"Accept-Language": "en"}).content.decode()
    assert "The demo organisation is loaded." in home and "/admin/rag_branding/branding/demo/remove/" in home
    response = admin_client.post(
        "/admin/rag_branding/branding/demo/remove/", follow=True, headers={"Accept-Language": "en"}
    )
    job = IndexJob.objects.latest("pk")
    assert response.redirect_chain[-1][0] == f"/admin/rag_documents/indexjob/{job.pk}/change/"
    assert f"Index job #{job.pk} drops its documents from the index." in response.content.decode()
    assert list(own_corpus.rglob("*.md")) == [] and not DemoState.objects.get(pk=1).loaded
    assert "LearnHub" not in organisation_get().zh.name
    assert (
        "The demo organisation is loaded."
        not in admin_client.get("/admin/", headers={"Accept-Language": "en"}).content.decode()
    )


def test_removing_the_demo_is_a_post_only(admin_client: Client) -> None:
    assert admin_client.get("/admin/rag_branding/branding/demo/remove/").status_code == 405


def test_the_name_and_words_page_edits_the_one_row(admin_client: Client) -> None:
    page = admin_client.get("/admin/rag_branding/branding/", follow=True)
    assert page.redirect_chain[-1][0] == "/admin/rag_branding/branding/1/change/"
    data = {
        "name": "Acme Helper", "name_en": "", "tagline": "", "tagline_en": "", "welcome": "", "welcome_en": "",
        "suggestions": "Q1\nQ2", "suggestions_en": "", "contact": "call Acme", "contact_en": "",
        "out_of_scope": "Acme only", "out_of_scope_en": "", "logo_url": "", "color": "#123456", "privacy_url": "",
    }  # fmt: skip
    assert admin_client.post("/admin/rag_branding/branding/1/change/", data).status_code == 302
    words = organisation_get()
    assert (words.en.name, words.en.suggestions, words.color) == ("Acme Helper", ("Q1", "Q2"), "#123456")
