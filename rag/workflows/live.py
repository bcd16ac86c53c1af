"""Keeping each worker's pipeline on the published workflows: switched within a second, no restart.

One background task per worker process checks twice a second whether what is published changed and, when it
did, hands the new definitions to `runtime.set_workflow` (precompiled into the graph cache first, so the first
request after a switch does not pay for it). Runs already in flight keep the graph they started with;
unpublishing returns a backend to the default workflow.

How a change is noticed: publishing bumps a generation number in Django's cache after commit. With a cache the
workers share (Redis), a check is one cache read and the database is read only when the number moved (and every
few seconds as a safety net). With a process-local cache (the embedded default), the number cannot reach other
processes, so each check reads the published drafts' (backend, id, version) from the database instead: one
indexed query of at most two rows. Either way the reads run on one dedicated thread, never on the event loop,
and a publish made in this process wakes its task at once.

It is `workflow_sync_task`, one of the tasks `infra.worker_tasks.WorkerTasksMiddleware` starts around the
ASGI application (daphne has no start-up hook, so it starts on the first connection); call
`workflow_sync_preload()` at start-up so the first requests already run what is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.db import close_old_connections

from infra.worker_tasks import WorkerTask
from rag.engine import WorkflowDefinition
from rag.provider import RuntimeGetter, get_runtime
from rag.runtime import BACKENDS, PipelineRuntime
from rag.workflows import selectors
from rag.workflows.graphs import graph_check

__all__ = [
    "WorkflowSync",
    "workflow_generation_bump",
    "workflow_sync_enabled",
    "workflow_sync_nudge",
    "workflow_sync_preload",
    "workflow_sync_start",
    "workflow_sync_stop",
    "workflow_sync_task",
]

logger = logging.getLogger(__name__)

GENERATION_KEY = "rag_workflows:published_generation"
CHECK_INTERVAL = 0.5
# With a shared cache the database is still read this often, in case a bump was lost (cache restart, eviction).
DB_SAFETY_INTERVAL = 5.0


def cache_is_shared() -> bool:
    """Whether Django's default cache is seen by every worker (a process-local one carries no news across)."""

    backend = type(caches["default"]).__name__
    return backend not in ("LocMemCache", "DummyCache")


def workflow_generation_bump() -> None:
    """After a publish or unpublish has committed: tell every worker, and wake this one's task now."""

    try:
        cache.add(GENERATION_KEY, 0, timeout=None)
        cache.incr(GENERATION_KEY)
    except Exception as exc:  # a cache outage only slows the news down to the database safety check
        logger.warning("could not bump the published-workflow generation (%s); workers notice within %ss", exc, 5)
    workflow_sync_nudge()


@dataclass(frozen=True, slots=True)
class _Read:
    generation: Any
    signature: Any  # PublishedSignature, or None when the database was not read
    published: dict[str, Any] | None  # backend -> PublishedWorkflow, only when the signature changed


def _read(*, shared_cache: bool, known_generation: Any, known_signature: Any, db_due: bool) -> _Read:
    """On the sync's own thread: what changed since the last check, reading as little as possible."""

    generation = None
    if shared_cache:
        try:
            generation = cache.get(GENERATION_KEY)
        except Exception:
            db_due = True  # the cache is down: the database says what is published
        if not db_due and generation == known_generation:  # None == None too: nobody has published yet
            return _Read(generation, None, None)
    close_old_connections()
    try:
        signature = selectors.workflow_published_signature()
        if signature == known_signature:
            return _Read(generation, signature, None)
        return _Read(generation, signature, selectors.workflow_published())
    finally:
        # CONN_MAX_AGE = 0 under ASGI: this thread is not a request, so nothing else would close its connection.
        close_old_connections()


class WorkflowSync:
    """This worker's task: `run()` until cancelled; `check()` once (tests)."""

    def __init__(
        self,
        *,
        runtime_getter: RuntimeGetter | None = None,
        interval: float = CHECK_INTERVAL,
        shared_cache: bool | None = None,
    ) -> None:
        self._runtime_getter = runtime_getter or get_runtime
        self.interval = interval
        self.shared_cache = cache_is_shared() if shared_cache is None else shared_cache
        self.loaded = asyncio.Event()
        self.applied: dict[str, tuple[int, int]] = {}  # backend -> (draft id, version) this worker runs
        self.switches = 0
        self._runtime: PipelineRuntime | None = None
        self._generation: Any = None
        self._signature: Any = None
        self._next_db = 0.0
        self._wake = asyncio.Event()
        self._failures = 0
        self._executor: ThreadPoolExecutor | None = None

    def nudge(self) -> None:
        """Check now instead of at the next tick (call on the loop's thread)."""
        self._wake.set()

    async def run(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workflow-sync")
        failures = 0
        try:
            while True:
                try:
                    await self.check()
                    failures = 0
                except Exception:
                    # A bug in applying one workflow must not stop the worker from following later publishes;
                    # logged once per streak so it cannot flood the log twice a second.
                    failures += 1
                    if failures == 1:
                        logger.exception("the workflow sync check failed; retrying every %ss", self.interval)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def check(self) -> bool:
        """Read what is published and apply any change; True when this worker switched a workflow."""
        loop = asyncio.get_running_loop()
        runtime = self._runtime_getter()
        fresh_runtime = runtime is not self._runtime  # first check, or the runtime was rebuilt (reset_runtime)
        now = loop.time()
        db_due = fresh_runtime or now >= self._next_db
        known_signature = None if fresh_runtime else self._signature
        try:
            result = await loop.run_in_executor(
                self._executor,
                lambda: _read(
                    shared_cache=self.shared_cache,
                    known_generation=self._generation,
                    known_signature=known_signature,
                    db_due=db_due,
                ),
            )
        except Exception as exc:
            self._failures += 1
            if self._failures == 1:  # once per streak: a database outage must not flood the log
                logger.warning("reading the published workflows failed (%s); retrying", exc, exc_info=exc)
            self.loaded.set()  # whoever waits for the first load must not hang on a database that is down
            return False
        if self._failures:
            logger.info("published workflows readable again after %d failed reads", self._failures)
            self._failures = 0
        switched = False
        if result.published is not None:
            switched = await self._apply(runtime, result.published)
        # Only now: had applying failed, the next check must see the change as still pending.
        self._generation = result.generation
        if result.signature is not None:
            self._next_db = now + DB_SAFETY_INTERVAL
            self._signature = result.signature
        self._runtime = runtime
        self.loaded.set()
        return switched

    async def _apply(self, runtime: PipelineRuntime, published: dict[str, Any]) -> bool:
        changes = self._changes(runtime, published)
        for change in changes:
            # Compiled into the graph cache before the switch: the first request on it does not pay for it.
            await self._precompile(runtime, change.definition)
        return self._switch(runtime, changes)

    def load_blocking(self) -> bool:
        """Read and apply what is published, on the calling thread (start-up, before the loop serves anyone)."""

        runtime = self._runtime_getter()
        try:
            result = _read(shared_cache=self.shared_cache, known_generation=None, known_signature=None, db_due=True)
        except Exception as exc:
            logger.warning("reading the published workflows at start-up failed (%s); the sync task retries", exc)
            return False
        finally:
            close_old_connections()
        self._generation, self._signature = result.generation, result.signature
        switched = self._switch(runtime, self._changes(runtime, result.published or {}))
        self._runtime = runtime
        return switched

    def _changes(self, runtime: PipelineRuntime, published: dict[str, Any]) -> list[_Change]:

        # A runtime this sync has not seen yet (the first check, or one rebuilt by reset_runtime) runs the default.
        current = self.applied if runtime is self._runtime else {}
        changes = []
        for backend in BACKENDS:
            entry = published.get(backend)
            wanted = (entry.draft_id, entry.version) if entry is not None else None
            if wanted == current.get(backend):
                continue
            definition: WorkflowDefinition | None = None
            label = "default"
            if entry is not None:
                check = graph_check(entry.graph, registry=runtime.registry)
                if check.valid:
                    definition, label = check.definition, f"{entry.name!r} v{entry.version}"
                else:
                    # Published while valid, so the node catalogue changed under it (a deploy): the default is a
                    # known-good pipeline, a half-understood graph is not.
                    logger.error(
                        "published workflow %r v%s for %s does not run in this worker (%s); serving the default",
                        entry.name,
                        entry.version,
                        backend,
                        "; ".join(p["message"] for p in check.problems),
                    )
            changes.append(_Change(backend, wanted, definition, label))
        return changes

    def _switch(self, runtime: PipelineRuntime, changes: list[_Change]) -> bool:
        applied = dict(self.applied) if runtime is self._runtime else {}
        for change in changes:
            runtime.set_workflow(change.backend, change.definition)
            if change.wanted is None:
                applied.pop(change.backend, None)
            else:
                applied[change.backend] = change.wanted
            self.switches += 1
            logger.info("workflow for %s: %s", change.backend, change.label)
        self.applied = applied
        return bool(changes)

    @staticmethod
    async def _precompile(runtime: PipelineRuntime, definition: WorkflowDefinition | None) -> None:
        if definition is None:
            return
        try:
            runtime.compile(definition, await runtime.deps())
        except Exception as exc:  # the first request compiles it again and reports the error to its client
            logger.warning("precompiling the published workflow %r failed: %s", definition.name, exc)


@dataclass(frozen=True, slots=True)
class _Change:
    backend: str
    wanted: tuple[int, int] | None  # (draft id, version), None for the default
    definition: WorkflowDefinition | None
    label: str


# ------------------------------------------------------------------------------------------------ lifecycle


def workflow_sync_enabled() -> bool:
    """``settings.RAG_WORKFLOW_SYNC`` (default on): tests that drive the ASGI application with communicators
    on short-lived loops may turn it off."""
    return bool(getattr(settings, "RAG_WORKFLOW_SYNC", True))


_preloaded: WorkflowSync | None = None  # what `workflow_sync_preload` loaded, for the task to carry on from


def _new_sync() -> WorkflowSync:
    global _preloaded
    sync, _preloaded = _preloaded, None
    return sync or WorkflowSync()


workflow_sync_task: WorkerTask[WorkflowSync] = WorkerTask(
    "rag-workflow-sync",
    _new_sync,
    restart_delay=5.0,
    enabled=workflow_sync_enabled,
    describe=lambda sync: "shared cache" if sync.shared_cache else "database check",
)


def workflow_sync_start(
    sync: WorkflowSync | None = None, *, factory: Callable[[], WorkflowSync] | None = None
) -> WorkflowSync | None:
    """Start this process's sync task on the running loop, once; later calls return the same sync (None while
    a crashed task waits to be restarted).

    `sync` (or one made by `factory`, else the one `workflow_sync_preload` loaded, else a new one) is only used
    when no task runs yet.
    """
    workflow_sync_task.start(factory if sync is None else lambda: sync)
    return workflow_sync_task.running()


def workflow_sync_preload() -> bool:
    """At server start-up, from sync code on the thread that will run the event loop (next to `warm_up()`):
    apply the published workflows before the first request, so a restarted worker never serves a stale one.
    The task started later by `WorkerTasksMiddleware` carries on from what this loaded."""
    global _preloaded
    if workflow_sync_task.running() is not None or not workflow_sync_enabled():
        return False
    _preloaded = _preloaded or WorkflowSync()
    return _preloaded.load_blocking()


async def workflow_sync_stop() -> None:
    global _preloaded
    _preloaded = None
    await workflow_sync_task.stop()


def workflow_sync_nudge() -> None:
    """From any thread: make this process's sync task check now (a publish made here is then live at once)."""
    workflow_sync_task.call_soon(WorkflowSync.nudge)
