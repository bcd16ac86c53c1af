"""Staff pages of the semantic cache: list with stats, inspect, delete (row and vector), flush all."""

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from rag.semcache.models import CacheEntry
from tests.rag.semcache.conftest import ENROL_SOURCES, remember

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    """The admin speaks the browser's language, zh-hant when it names none: these tests read it in English."""
    settings.LANGUAGE_CODE = "en"


CHANGELIST = "admin:rag_semcache_cacheentry_changelist"


@pytest.fixture
def two_entries(semantic_cache):
    async def fill():
        await remember(semantic_cache, "如何重設密碼？")
        await remember(semantic_cache, "如何報名課程？", answer="在課程頁點選「立即報名」[1]。", sources=ENROL_SOURCES)
        assert await semantic_cache.lookup("密碼要怎麼重設", language="zh-hant") is not None

    async_to_sync(fill)()
    return semantic_cache


def lookup(semantic_cache, question):
    return async_to_sync(semantic_cache.lookup)(question, language="zh-hant")


def test_the_list_shows_entries_and_the_cache_counters(admin_client, two_entries):
    page = admin_client.get(reverse(CHANGELIST))

    assert page.status_code == 200
    html = page.content.decode()
    assert "如何重設密碼？" in html and "如何報名課程？" in html
    assert "1 hits, 0 misses" in html
    assert "Flush all" in html


def test_an_entry_shows_its_answer_and_sources(admin_client, two_entries):
    entry = CacheEntry.objects.get(question="如何重設密碼？")

    page = admin_client.get(reverse("admin:rag_semcache_cacheentry_change", args=[entry.pk]))

    html = page.content.decode()
    assert page.status_code == 200
    assert "在登入頁點選「忘記密碼」[1]。" in html
    assert "https://help.example/zh/password-reset" in html
    assert 'name="_save"' not in html  # read-only


def test_deleting_an_entry_deletes_its_vector(admin_client, two_entries):
    entry = CacheEntry.objects.get(question="如何重設密碼？")

    page = admin_client.post(reverse("admin:rag_semcache_cacheentry_delete", args=[entry.pk]), {"post": "yes"})

    assert page.status_code == 302
    assert list(CacheEntry.objects.values_list("question", flat=True)) == ["如何報名課程？"]
    assert lookup(two_entries, "如何重設密碼？") is None
    assert lookup(two_entries, "如何報名課程？") is not None


def test_the_delete_action_deletes_vectors_too(admin_client, two_entries):
    ids = [str(pk) for pk in CacheEntry.objects.values_list("pk", flat=True)]

    admin_client.post(reverse(CHANGELIST), {"action": "delete_selected", "_selected_action": ids, "post": "yes"})

    assert CacheEntry.objects.count() == 0
    assert two_entries.stats()["entries"] == 0


def test_flush_all_empties_the_cache(admin_client, two_entries):
    page = admin_client.post(reverse("admin:rag_semcache_cacheentry_flush"))

    assert page.status_code == 302
    assert CacheEntry.objects.count() == 0
    assert lookup(two_entries, "如何報名課程？") is None


def test_flush_all_needs_a_post_from_staff(client, admin_client, two_entries):
    url = reverse("admin:rag_semcache_cacheentry_flush")

    assert admin_client.get(url).status_code == 405
    assert client.post(url).status_code == 302  # to the login page
    assert CacheEntry.objects.count() == 2


def test_entries_cannot_be_added_by_hand(admin_client):
    assert admin_client.get(reverse("admin:rag_semcache_cacheentry_add")).status_code == 403


def test_the_list_works_in_a_process_whose_pipeline_has_not_opened_the_cache(admin_client, semantic_cache):
    semantic_cache.close()

    page = admin_client.get(reverse(CHANGELIST))

    assert page.status_code == 200
    assert "has not opened the cache" in page.content.decode()


def test_an_entry_shows_the_index_version_it_was_answered_on_across_incremental_reindexes(
    admin_client, two_entries, store, corpus_dir
):
    from rag.retrieval.indexer import live_documents, reindex

    lineage = store.index_version().version
    reindex(store, two_entries.embedder, embed=[], copy=set(live_documents(store)) - {"zh-password-reset"})
    assert store.index_version().version == lineage and store.index_version().generation == 2
    entry = CacheEntry.objects.get(question="如何報名課程？")

    page = admin_client.get(reverse("admin:rag_semcache_cacheentry_change", args=[entry.pk]))
    listed = admin_client.get(reverse(CHANGELIST), {"index_version": lineage})

    assert entry.index_version == lineage
    assert lineage in page.content.decode()
    assert "如何報名課程？" in listed.content.decode()
    assert lookup(two_entries, "如何報名課程？") is not None  # still served on the new build
