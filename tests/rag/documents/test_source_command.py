"""`manage.py source add|sync|list|remove` in-process (the store is free) against a real local website."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from rag.documents.models import Document, DocumentStatus, Source
from tests.local_site import LocalSite, html, sitemap

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as served:
        served.pages["/a.html"] = html("Library hours", "<p>The library opens at 8:00.</p>")
        served.pages["/b.html"] = html("Parking", "<p>Parking permits cost NT$ 500.</p>")
        served.pages["/sitemap.xml"] = sitemap([served.url("/a.html"), served.url("/b.html")])
        yield served


def test_add_sync_list_and_remove_a_sitemap_source(configured: Path, site: LocalSite) -> None:
    run("reindex")  # the corpus, so that removing the source leaves something in the index
    out, _ = run("source", "add", "--name", "help", "--sitemap", site.url("/sitemap.xml"), "--internal", "--rate", "50")
    assert "Added source help" in out
    out, _ = run("source", "sync", "help", "--wait")
    assert "Pages: 2 fetched" in out and "Documents: 2 added, 0 updated, 0 unchanged, 0 deleted" in out
    assert Document.objects.get(doc_id="web/help/a.html").url == site.url("/a.html")
    out, _ = run("source", "list")
    assert out.startswith("help\tsitemap\t") and "succeeded" in out
    out, _ = run("source", "remove", "help", "--wait")
    assert "2 deleted" in out
    assert not Source.objects.exists()
    assert Document.objects.get(doc_id="web/help/a.html").status == DocumentStatus.DELETED


def test_bad_arguments_name_what_was_wrong(configured: Path, site: LocalSite) -> None:
    with pytest.raises(CommandError, match="not an http"):
        run("source", "add", "--name", "x", "--url", "ftp://example.com/")
    with pytest.raises(CommandError, match="--every '6 weeks'"):
        run("source", "add", "--name", "x", "--url", site.url("/"), "--every", "6 weeks")
    with pytest.raises(CommandError, match="no source named 'nope'"):
        run("source", "sync", "nope")
