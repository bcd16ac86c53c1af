"""Links are http(s) only: in front matter, in rows and payloads, in the admin and in `/v1` citations."""

from __future__ import annotations

import pytest
from django.contrib import admin

from chatbot.openai_api.chunks import sources_of
from rag.retrieval.markdown import FrontMatterError, document_from_text
from rag.retrieval.retriever import to_chunk
from rag.retrieval.store import StoreHit
from rag.semcache.admin import CacheEntryAdmin
from rag.semcache.models import CacheEntry
from rag.text.links import http_link


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "data:text/html,x", "//evil.example/x", "/relative", "https://", "http://a b/", "ftp://x/"],
)
def test_anything_but_an_absolute_http_url_is_no_link(url: str) -> None:
    assert http_link(url) == ""


def test_http_and_https_urls_pass_as_they_are() -> None:
    assert http_link(" https://help.example.edu/zh/fees.html?x=1 ") == "https://help.example.edu/zh/fees.html?x=1"
    assert http_link("HTTP://Help.example/") == "HTTP://Help.example/"


def test_a_javascript_url_in_front_matter_is_a_front_matter_error() -> None:
    with pytest.raises(FrontMatterError, match="http"):
        document_from_text("---\ntitle: X\nlanguage: en\nurl: javascript:alert(1)\n---\n\nBody.\n", doc_id="x")


def test_a_stored_payload_link_is_checked_when_read_and_when_sent() -> None:
    hit = StoreHit(point_id="p", score=1.0, payload={"doc_id": "x", "url": "javascript:alert(1)", "text": "t"})
    assert to_chunk(hit).url == ""
    summary = {"sources": [{"ref": 1, "url": "javascript:alert(1)"}, {"ref": 2, "url": "https://a.example/"}]}
    assert sources_of(summary)["citations"] == ["", "https://a.example/"]


def test_the_cache_admin_shows_a_javascript_source_as_text_not_a_link() -> None:
    entry = CacheEntry(
        sources=[
            {"ref": 1, "url": "javascript:alert(1)", "title": "Bad", "doc_id": "bad"},
            {"ref": 2, "url": "https://a.example/", "title": "Good", "doc_id": "good"},
        ]
    )
    html = str(CacheEntryAdmin(CacheEntry, admin.site).sources_display(entry))
    assert "javascript" not in html and "<li>[1] Bad (bad)</li>" in html
    assert "<a href='https://a.example/'>Good</a>" in html
