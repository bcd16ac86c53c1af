"""Two daphne workers started with the same environment and no Qdrant server: one index, one semantic cache.

The workers share a database (a fresh PostgreSQL database when the suite runs with `DATABASE_URL`, else one SQLite
file) and, when the suite runs with `REDIS_URL`, that Redis. Both answer; a reindex run while they serve is what
both serve within 2 s of its switch; an answer cached by one is a hit on the other within 2 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daphne_workers import Worker, manage, running_workers, worker_env
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

NEW_TEXT = "\n\n## 獨角獸學習護照\n\n完成三門獨角獸課程即可領取獨角獸學習護照。\n"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[tuple[Worker, ...], dict[str, str]]]:
    redis_url = os.environ.get("REDIS_URL", "")
    with (
        worker_env(
            "replica-workers", redis_url=redis_url, prepare="own corpus", RAG_SEMANTIC_CACHE_ENABLED="true"
        ) as env,
        running_workers([env, env]) as workers,
    ):
        yield workers, env


def ask(worker: Worker, question: str) -> dict[str, Any]:
    """The terminal event of one SSE answer (every answer checked whole: seq 1..n, one terminal)."""
    events = []
    with httpx.stream(
        "POST", worker.url + "/api/v1/rag/ask/stream_chat", json={"question": question}, timeout=30.0
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    terminals = [e for e in events if e["channel"] in ("meta_summary", "error")]
    assert terminals == [events[-1]], events[-3:]
    return events[-1]


def cited(terminal: dict[str, Any]) -> list[str]:
    return [source["doc_id"] for source in terminal.get("sources", [])]


def cache_rows(env: dict[str, str]) -> int:
    """Entries in the shared database, read the way an operator would (not through either worker)."""
    url = env["DATABASE_URL"]
    query = "SELECT count(*) FROM rag_semcache_cacheentry"
    if url:
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as connection:
            row = connection.execute(query).fetchone()
            return int(row[0]) if row else 0
    with contextlib.closing(sqlite3.connect(Path(env["DATA_DIR"]) / "db.sqlite3", timeout=5)) as connection:
        return int(connection.execute(query).fetchone()[0])


def test_both_workers_answer_from_the_one_index(cluster: tuple[tuple[Worker, ...], dict[str, str]]) -> None:
    (first, second), _ = cluster
    for worker in (first, second):
        ready = worker.http.get("/api/v1/ready", timeout=10.0)
        assert ready.status_code == 200, ready.text
        assert "loaded" in ready.json()["checks"]["store"]["detail"]
        terminal = ask(worker, "如何重設密碼？")
        assert terminal["channel"] == "meta_summary" and "zh-password-reset" in cited(terminal)


def test_a_reindex_is_served_by_every_worker_within_two_seconds(
    cluster: tuple[tuple[Worker, ...], dict[str, str]],
) -> None:
    (first, second), env = cluster
    # nothing in the corpus speaks of unicorns yet: not asked before the change, so no answer to it is cached
    question = "獨角獸學習護照怎麼領取？"
    document = Path(env["CORPUS_DIR"]) / "zh-learning-hours.md"
    document.write_text(document.read_text(encoding="utf-8") + NEW_TEXT, encoding="utf-8")

    # a command run beside the workers: a worker's job runner takes the job, the command follows it to the switch
    output = manage(env, "reindex")
    switched = time.monotonic()
    assert "1 updated" in output, output

    served = {worker.url: 0.0 for worker in (first, second)}

    def both_serve_it() -> bool:
        for worker in (first, second):
            if not served[worker.url] and "zh-learning-hours" in cited(ask(worker, question))[:1]:
                served[worker.url] = time.monotonic() - switched
        return all(served.values())

    wait_for(both_serve_it, within=2.0, interval=0.05, note=lambda: f"served after (s): {served}")


def test_an_answer_cached_by_one_worker_is_a_hit_on_the_other(
    cluster: tuple[tuple[Worker, ...], dict[str, str]],
) -> None:
    (first, second), env = cluster
    before = cache_rows(env)
    question = "How do I download my certificate?"
    assert ask(first, question)["cached"] is False
    # the first worker writes the entry just after its answer ends
    wait_for(lambda: cache_rows(env) > before, within=5.0, note="the answer was not cached")
    stored = time.monotonic()
    # the bound: within 2 s of the write, the other worker serves it (its first ask; a miss would cache it itself).
    # A sleep to the end of the bound, kept: the bound is what is tested, and with one ask allowed there is nothing
    # to poll (no endpoint shows what the other worker's cache mirror holds).
    time.sleep(max(0.0, stored + 2.0 - time.monotonic()))
    terminal = ask(second, question)
    assert terminal["cached"] is True, terminal
    assert "en-certificate-download" in cited(terminal)
