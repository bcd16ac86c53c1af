"""A website source kept in step beside two real daphne workers sharing PostgreSQL (or SQLite) and Redis: a page of
the local site is edited, `manage.py source sync NAME --wait` is run beside the workers (one of their job runners
takes the sync), and both workers answer with the new text within seconds, the answer cached before the edit
dropped on both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.concurrency.cluster_redis import suite_redis_url
from tests.daphne_workers import Worker, manage, running_workers, worker_env
from tests.local_site import LocalSite, html, sitemap
from tests.stream_clients import sse_summary
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

QUESTION = "When do applications for the unicorn scholarship close?"
BEFORE = "<p>Applications for the unicorn scholarship close on 15 March.</p>"
AFTER = "<p>Applications for the unicorn scholarship close on 22 April.</p>"

Cluster = tuple[tuple[Worker, ...], dict[str, str], LocalSite]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    redis_url = suite_redis_url("website sources synced beside two workers")
    with LocalSite() as site:
        site.pages["/scholarship.html"] = html("Unicorn scholarship", BEFORE)
        site.pages["/fees.html"] = html("Fees", "<p>Visitors pay NT$ 2,000 a credit.</p>")
        site.pages["/sitemap.xml"] = sitemap([site.url("/scholarship.html"), site.url("/fees.html")])
        with worker_env("source-sync-workers", redis_url=redis_url, RAG_SEMANTIC_CACHE_ENABLED="true") as env:
            sitemap_url = site.url("/sitemap.xml")
            manage(env, "source", "add", "--name", "help", "--sitemap", sitemap_url, "--internal", "--rate", "50")
            # the first sync before the workers start: the command runs it itself
            assert "2 added" in manage(env, "source", "sync", "help", "--wait")
            with running_workers([env, env]) as workers:
                yield workers, env, site


def ask(worker: Worker) -> dict[str, Any]:
    return sse_summary(worker.url, QUESTION)


def test_an_edited_page_synced_beside_two_workers_is_what_both_answer(cluster: Cluster) -> None:
    (first, second), env, site = cluster
    before = ask(first)
    assert "15 March" in before["text"], before
    assert [s["url"] for s in before["sources"]][:1] == [site.url("/scholarship.html")]
    # cached by the first worker, a hit on the second: both hold the old answer now
    wait_for(lambda: ask(second)["cached"], within=5.0, interval=0.2)

    site.pages["/scholarship.html"] = html("Unicorn scholarship", AFTER)
    output = manage(env, "source", "sync", "help", "--wait")
    synced = time.monotonic()
    assert "1 updated, 1 unchanged" in output, output
    assert site.not_modified["/fees.html"] >= 1  # the other page cost a 304

    served = {worker.url: 0.0 for worker in (first, second)}

    def both_answer_new_text() -> bool:
        for worker in (first, second):
            if not served[worker.url] and "22 April" in ask(worker)["text"]:
                served[worker.url] = time.monotonic() - synced
        return all(served.values())

    wait_for(both_answer_new_text, within=5.0, interval=0.1, note=lambda: f"new text served after (s): {served}")
    for worker in (first, second):
        assert "15 March" not in ask(worker)["text"]
