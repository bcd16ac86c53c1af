"""The job runner: claims rows, runs them on the store the retriever searches, stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError

from infra.worker_tasks import WorkerTasksMiddleware
from rag.documents import runner as runner_module
from rag.documents.models import IndexJob, JobRunnerHeartbeat, JobStatus
from rag.documents.runner import JobContext, JobRunner, job_runner_task
from rag.documents.services import index_job_create
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.store import VectorStore
from tests.asgi_doubles import receive_unused, send_unused
from tests.rag.documents.conftest import CORPUS, CountingEmbedder, doc_ids_of
from tests.waiting import until_async

pytestmark = pytest.mark.django_db(transaction=True)


async def wait_for(job: IndexJob, *, until: Any, within: float = 20.0) -> IndexJob:
    async def read() -> IndexJob:
        # the suite's in-memory SQLite reports a lock at once instead of waiting for it
        with contextlib.suppress(OperationalError):
            await sync_to_async(job.refresh_from_db)()
        return job

    return await until_async(
        read, until, within=within, interval=0.05, note=lambda: f"job #{job.pk}: {job.status}/{job.stage}"
    )


@pytest.fixture
async def running(store: VectorStore, embedder: CountingEmbedder) -> AsyncIterator[tuple[JobRunner, StoreRetriever]]:
    retriever = StoreRetriever(store, embedder)

    async def context() -> JobContext:
        return JobContext(store=store, embedder=embedder)

    job_runner = JobRunner(context_factory=context, poll_interval=0.05, heartbeat_interval=0.2, name="test-runner:1")
    task = asyncio.create_task(job_runner.run())
    yield job_runner, retriever
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_runner_runs_queued_jobs_and_the_retriever_serves_each_new_build(
    running: tuple[JobRunner, StoreRetriever], store: VectorStore, corpus: Path
) -> None:
    _, retriever = running
    job = await sync_to_async(index_job_create)()
    job = await wait_for(job, until=lambda j: j.finished)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.runner == "test-runner:1"
    assert await sync_to_async(JobRunnerHeartbeat.objects.filter(runner="test-runner:1").exists)()
    before = await retriever.search("waiting list enrolment", limit=3)

    (corpus / "en-enrolment.md").write_text(CORPUS["en-enrolment.md"] + "\n## Waiting list\n\nJoin the waiting list.\n")
    (corpus / "en-waiting.md").write_text("---\ntitle: Waiting list\nlanguage: en\n---\n\nWaiting list rules.\n")
    job = await sync_to_async(index_job_create)()
    job = await wait_for(job, until=lambda j: j.finished)
    assert (job.status, job.added, job.updated) == (JobStatus.SUCCEEDED, 1, 1)
    after = await retriever.search("waiting list", limit=3)
    assert "en-waiting" in {c.doc_id for c in after} and "en-waiting" not in {c.doc_id for c in before}
    assert any("Join the waiting list" in c.text for c in after)


async def test_stopping_the_runner_mid_job_cancels_it_and_keeps_the_live_index(
    store: VectorStore, embedder: CountingEmbedder, corpus: Path
) -> None:
    inner = embedder.embed_documents

    def slow(texts: Any) -> Any:
        time.sleep(0.3)
        return inner(texts)

    embedder.embed_documents = slow  # type: ignore[method-assign]

    async def context() -> JobContext:
        return JobContext(store=store, embedder=embedder)

    first = JobRunner(context_factory=context, poll_interval=0.05, name="first:1")
    task = asyncio.create_task(first.run())
    job = await wait_for(await sync_to_async(index_job_create)(), until=lambda j: j.finished)
    live, ids = await asyncio.to_thread(lambda: (store.live_collection(), doc_ids_of(store)))
    for name, text in CORPUS.items():
        (corpus / name).write_text(text + "\nchanged\n")
    job = await sync_to_async(index_job_create)()
    await wait_for(job, until=lambda j: j.stage == "embedding")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    job = await wait_for(job, until=lambda j: j.finished, within=5)
    assert job.status == JobStatus.CANCELLED
    now = await asyncio.to_thread(lambda: (store.live_collection(), store.builds(), doc_ids_of(store)))
    assert now == (live, [live], ids)
    assert not await sync_to_async(JobRunnerHeartbeat.objects.filter(runner="first:1").exists)()


async def test_a_runner_that_cannot_have_the_store_waits_without_claiming(configured: Path) -> None:
    from rag.retrieval.store import StoreLockedError

    tried = asyncio.Event()

    async def locked() -> JobContext:
        tried.set()
        raise StoreLockedError(configured / "qdrant")

    waiting = JobRunner(context_factory=locked, poll_interval=0.05, name="waiting:1")
    job = await sync_to_async(index_job_create)()
    task = asyncio.create_task(waiting.run())
    # Refused the store, the runner is back in its wait before it looks again (it raises and sleeps in one step).
    await asyncio.wait_for(tried.wait(), 10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await sync_to_async(job.refresh_from_db)()
    assert job.status == JobStatus.PENDING


async def test_the_middleware_starts_the_runner_once_and_stops_it_at_lifespan_shutdown(
    monkeypatch: Any, settings: Any
) -> None:
    started: list[str] = []
    running = asyncio.Event()

    class FakeRunner:
        name = "fake:1"

        async def run(self) -> None:
            started.append("run")
            running.set()
            await asyncio.Event().wait()  # until cancelled

    monkeypatch.setattr(runner_module, "JobRunner", FakeRunner)
    settings.RAG_JOB_RUNNER = True
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    wrapped = WorkerTasksMiddleware(app, [job_runner_task])
    try:
        await wrapped({"type": "http"}, receive_unused, send_unused)
        await wrapped({"type": "http"}, receive_unused, send_unused)
        await asyncio.wait_for(running.wait(), 10)
        assert isinstance(runner_module.job_runner_running(), FakeRunner) and started == ["run"]

        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        sent: list[str] = []

        async def receive() -> dict[str, str]:
            return next(messages)

        async def send(message: dict[str, str]) -> None:
            sent.append(message["type"])

        await wrapped({"type": "lifespan"}, receive, send)
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
        assert runner_module.job_runner_running() is None  # stopped at shutdown
        assert started == ["run"]  # startup found the runner already running
        assert seen == ["http", "http"]  # the lifespan scope is answered by the middleware
    finally:
        await runner_module.job_runner_stop()


async def test_the_runner_is_off_unless_enabled(monkeypatch: Any, settings: Any) -> None:
    class FakeRunner:
        name = "fake:1"

        async def run(self) -> None:
            await asyncio.Event().wait()  # until cancelled

    monkeypatch.setattr(runner_module, "JobRunner", FakeRunner)
    settings.RAG_JOB_RUNNER = False
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["type"])

    wrapped = WorkerTasksMiddleware(app, [job_runner_task])
    try:
        await wrapped({"type": "http"}, receive_unused, send_unused)
        assert calls == ["http"] and runner_module.job_runner_running() is None

        settings.RAG_JOB_RUNNER = True  # the switch is read at each connection
        await wrapped({"type": "http"}, receive_unused, send_unused)
        assert isinstance(runner_module.job_runner_running(), FakeRunner)
    finally:
        await runner_module.job_runner_stop()
