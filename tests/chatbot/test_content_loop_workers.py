"""The content team's loop on two real daphne workers sharing PostgreSQL (or SQLite) and Redis: a curated answer
added with `manage.py curated add` is what a paraphrase of its question gets, marked curated, on both workers, and
it retires the cached answer to that question; ten unanswerable questions, asked of either worker, come back as
fewer content-gap topics; the insights summary counts every question asked."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daphne_workers import Worker, manage, running_workers, worker_env
from tests.stream_clients import sse_summary
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

Cluster = tuple[tuple[Worker, ...], dict[str, str]]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    redis_url = os.environ.get("REDIS_URL", "")
    with (
        worker_env("content-loop", redis_url=redis_url, RAG_SEMANTIC_CACHE_ENABLED="true") as env,
        running_workers([env, env]) as workers,
    ):
        yield workers, env


ASKED: list[str] = []  # every question this module asked the cluster (the summary must count as many)


def ask(worker: Worker, question: str) -> dict[str, Any]:
    """The terminal event of one SSE answer, with the answer's text under "text"."""
    ASKED.append(question)
    return sse_summary(worker.url, question)


def test_a_curated_answer_reaches_both_workers_and_retires_the_cached_one(cluster: Cluster) -> None:
    (first, second), env = cluster
    question = "How do I download my certificate?"
    assert ask(first, question)["outcome"] == "answered"
    # cached by the first worker, a hit on the second
    wait_for(lambda: ask(second, question)["cached"], within=5.0, interval=0.2)

    answer = "Open My learning, choose the course and press Download certificate."
    output = manage(
        env, "curated", "add", "--question", question, "--answer", answer, "--language", "en",
        "--url", "https://help.example/certificates",
    )  # fmt: skip
    assert output.startswith("added"), output

    paraphrase = "how do i download my certificate"
    for worker in (first, second):

        def curated(worker: Worker = worker) -> dict[str, Any]:
            terminal = ask(worker, paraphrase)
            return terminal if terminal["curated"] else {}

        got = wait_for(curated, within=2.0, interval=0.1, note=f"{worker.url} did not serve the curated answer")
        assert got["outcome"] == "curated" and got["cached"] is False
        assert got["text"].startswith(answer) and "https://help.example/certificates" in got["text"]
    # the hits counted on both workers reach the row (each worker writes its own within a second)
    wait_for(lambda: "hits=2" in manage(env, "curated", "list"), within=5.0, interval=0.5)
    # and the answer cached before is gone: the curated one covers its question now
    assert cache_rows(env, question) == 0


def cache_rows(env: dict[str, str], question: str) -> int:
    """Cached answers to `question` in the shared database, read as an operator would (not through a worker)."""
    query = "SELECT count(*) FROM rag_semcache_cacheentry WHERE question = %s"
    if env["DATABASE_URL"]:
        import psycopg

        with psycopg.connect(env["DATABASE_URL"], connect_timeout=5) as connection:
            row = connection.execute(query, (question,)).fetchone()
            return int(row[0]) if row else 0
    with contextlib.closing(sqlite3.connect(Path(env["DATA_DIR"]) / "db.sqlite3", timeout=5)) as connection:
        return int(connection.execute(query.replace("%s", "?"), (question,)).fetchone()[0])


UNANSWERABLE = (
    "Can I bring my dog to the exam centre?",
    "Can I bring my dog into the exam centre?",
    "can i bring a dog to the exam centre",
    "考場可以帶狗嗎？",
    "考場可以帶狗進去嗎？",
    "Is there a vegetarian lunch at the workshop?",
    "is there vegetarian lunch at the workshop",
    "工作坊有素食午餐嗎？",
    "工作坊有沒有素食午餐？",
    "工作坊的午餐有素食嗎？",
)


def test_unanswerable_questions_become_fewer_gap_topics_and_the_summary_counts_every_question(
    cluster: Cluster,
) -> None:
    (first, second), env = cluster
    for n, question in enumerate(UNANSWERABLE):
        assert ask((first, second)[n % 2], question)["outcome"] == "refused", question
    key = manage(env, "apikey", "create", "--name", "reports", "--scopes", "admin-read").split()[-1]
    headers = {"Authorization": f"Bearer {key}"}

    topics = second.http.get("/api/v1/admin/insights/gaps", headers=headers, timeout=30.0).json()["topics"]
    assert sum(topic["count"] for topic in topics) == len(UNANSWERABLE)
    assert len(topics) < len(UNANSWERABLE) and all(topic["count"] >= 2 for topic in topics), topics

    summary = first.http.get("/api/v1/admin/insights/summary", headers=headers, timeout=30.0).json()
    assert summary["questions"] == len(ASKED), (summary["questions"], len(ASKED))
    assert summary["outcomes"]["refused"] == len(UNANSWERABLE)
    assert summary["outcomes"]["curated"] >= 2
