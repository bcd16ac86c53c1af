"""The job runner: one asyncio task per process that owns the vector store, running index and backfill jobs.

It claims pending job rows one at a time (rag.documents.services.job_claim_next), runs a reindex on a worker
thread and a backfill on the loop (its LLM calls) with its blocking work on a thread, and beats a heartbeat so
commands know someone will run what they queue. It uses the pipeline runtime's own store and embedder (the
runtime the process's assembly point provided, `rag.provider.get_runtime().deps()`): the store it switches is the
one the retriever searches, so the server answers from the new build as soon as the alias moves (in local mode
the store swaps its in-memory copy in the same step).

In the server it is started like the live-settings task: `job_runner_task` is one of the tasks
`infra.worker_tasks.WorkerTasksMiddleware` starts on the first connection (daphne has no start-up hook) or
at lifespan start-up (uvicorn), and restarts after a crash. It runs where
``settings.RAG_JOB_RUNNER`` is true (default: ``RAG_PRELOAD``, i.e. in the process that takes the store first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connections

from infra.worker_tasks import WorkerTask
from rag.documents.backfill import backfill_job_execute
from rag.documents.indexing import index_job_execute
from rag.documents.models import BackfillJob, IndexJob, Job
from rag.documents.services import (
    job_claim_next,
    runner_forget,
    runner_heartbeat,
    runner_name,
    sources_due_enqueue,
)
from rag.provider import get_runtime
from rag.retrieval.embedding import Embedder
from rag.retrieval.store import StoreLockedError, VectorStore

__all__ = [
    "JobContext",
    "JobRunner",
    "job_execute",
    "job_runner_enabled",
    "job_runner_running",
    "job_runner_start",
    "job_runner_stop",
    "job_runner_task",
    "run_blocking",
    "runtime_job_context",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_RETRY_DELAY = 5.0


@dataclass(frozen=True, slots=True)
class JobContext:
    store: VectorStore
    embedder: Embedder
    llm: Any = None
    prompts: Any = None


ContextFactory = Callable[[], Awaitable[JobContext | None]]


async def runtime_job_context() -> JobContext | None:
    """The pipeline runtime's store and embedder (opening the store if the runtime has not yet), its LLM and
    prompts. None when the retriever is not a store retriever (a test double): nothing to index then."""
    deps = await get_runtime().deps()
    retriever = deps.retriever
    store = getattr(retriever, "store", None)
    embedder = getattr(retriever, "embedder", None)
    if not isinstance(store, VectorStore) or embedder is None:
        return None
    return JobContext(store=store, embedder=embedder, llm=deps.llm, prompts=getattr(deps, "prompts", None))


def _closing(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        # this thread's connection is not reused by anyone after the call
        connections.close_all()


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn` on a thread of its own (its database connection closed at the end), awaited without blocking."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-job") as executor:
        return await asyncio.get_running_loop().run_in_executor(executor, lambda: _closing(fn, *args, **kwargs))


async def job_execute(job: Job, context: JobContext, *, stop: threading.Event) -> Job:
    """Run one claimed job with `context`'s store. When the awaiting task is cancelled, `stop` is set and the job
    is given time to end itself (a reindex drops its unfinished build, leaving the live index as it was)."""
    if isinstance(job, BackfillJob):
        return await backfill_job_execute(
            job=job, store=context.store, embedder=context.embedder, llm=context.llm, prompts=context.prompts, stop=stop
        )
    if not isinstance(job, IndexJob):
        raise TypeError(f"not a job: {job!r}")
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rag-index-{job.pk}")
    future = loop.run_in_executor(
        executor,
        lambda: _closing(index_job_execute, job=job, store=context.store, embedder=context.embedder, stop=stop),
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait({future}, timeout=30.0)
        raise
    finally:
        executor.shutdown(wait=False)


class JobRunner:
    def __init__(
        self,
        *,
        context_factory: ContextFactory = runtime_job_context,
        poll_interval: float = 1.0,
        heartbeat_interval: float = 5.0,
        name: str = "",
    ) -> None:
        self.context_factory = context_factory
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.name = name or runner_name()
        self.current: Job | None = None
        self.jobs_run = 0
        self._executor: ThreadPoolExecutor | None = None

    async def _db(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        # one thread for the runner's own queries: they never wait behind a job, and use one connection
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    async def run(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-job-runner")
        context: JobContext | None = None
        warned = False
        next_beat = 0.0
        loop = asyncio.get_running_loop()
        try:
            while True:
                if context is None:
                    try:
                        context = await self.context_factory()
                    except StoreLockedError as exc:
                        if not warned:
                            logger.warning("job runner %s waits for the vector store: %s", self.name, exc)
                            warned = True
                    except Exception:
                        if not warned:
                            logger.exception("job runner %s cannot open the pipeline runtime; retrying", self.name)
                            warned = True
                    if context is None:
                        await asyncio.sleep(_RETRY_DELAY)
                        continue
                    logger.info("job runner %s runs index and backfill jobs on %s", self.name, context.store.location)
                try:
                    if loop.time() >= next_beat:
                        await self._db(runner_heartbeat, runner=self.name, store=context.store.location)
                        next_beat = loop.time() + self.heartbeat_interval
                    # scheduled source syncs become pending jobs here, on whichever runner polls first
                    await self._db(sources_due_enqueue)
                    job = await self._db(job_claim_next, runner=self.name, store_owner=context.store.local)
                except DatabaseError:
                    # the database is down or busy: try again later, the runner must outlive it
                    logger.warning("job runner %s: database unavailable", self.name, exc_info=True)
                    await asyncio.sleep(_RETRY_DELAY)
                    continue
                if job is None:
                    await asyncio.sleep(self.poll_interval)
                    continue
                await self._run(job, context)
        finally:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._db(_closing, runner_forget, runner=self.name))
            self._executor.shutdown(wait=False)

    async def _run(self, job: Job, context: JobContext) -> None:
        started = time.monotonic()
        logger.info("job runner %s starts %s", self.name, job)
        self.current = job
        beating = asyncio.create_task(self._beat(job, context), name=f"rag-job-heartbeat-{job.pk}")
        try:
            finished = await job_execute(job, context, stop=threading.Event())
            logger.info("%s %s in %.2fs (%s)", job, finished.status, time.monotonic() - started, finished.error or "ok")
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("job runner %s: %s crashed", self.name, job)
        finally:
            beating.cancel()
            self.current = None
            self.jobs_run += 1

    async def _beat(self, job: Job, context: JobContext) -> None:
        """Heartbeats while a job runs, even through long LLM calls or a long load, so it is never taken for
        abandoned."""
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self._db(runner_heartbeat, runner=self.name, store=context.store.location, job=job)
            except Exception:
                logger.warning("job runner %s: heartbeat failed", self.name, exc_info=True)


# ------------------------------------------------------------------------------------------------ lifecycle


def job_runner_enabled() -> bool:
    return bool(getattr(settings, "RAG_JOB_RUNNER", getattr(settings, "RAG_PRELOAD", False)))


def _new_runner() -> JobRunner:
    return JobRunner()


# Stopping gives a running reindex the 30 s `job_execute` allows it to end itself, and a little more.
job_runner_task: WorkerTask[JobRunner] = WorkerTask(
    "rag-job-runner",
    _new_runner,
    restart_delay=5.0,
    stop_timeout=35.0,
    enabled=job_runner_enabled,
    describe=lambda runner: runner.name,
)


def job_runner_start(runner: JobRunner | None = None) -> asyncio.Task[None] | None:
    """Start this process's job runner on the running loop, once; later calls return the same task (None while
    a crashed runner waits to be restarted)."""
    return job_runner_task.start(None if runner is None else lambda: runner)


async def job_runner_stop() -> None:
    """Stop the runner; a running job is stopped between batches (a reindex leaves the live index as it was)."""
    await job_runner_task.stop()


def job_runner_running() -> JobRunner | None:
    return job_runner_task.running()
