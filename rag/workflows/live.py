"""Keeping each worker's pipeline on the published workflows: switched within a second, no restart.

A publish or unpublish publishes `WORKFLOWS_TOPIC` on the change feed after its commit (infra.changefeed); each
worker's watcher then runs `workflow_follow`, which reads the published drafts' (backend, id, version) (one indexed
query of at most two rows, on a thread) and, when they moved, hands the new definitions to `runtime.set_workflow`
(precompiled into the graph cache first, so the first request after a switch does not pay for it). Runs already in
flight keep the graph they started with; unpublishing returns a backend to the default workflow. A publish made in
this process is dispatched here at once.

Call `workflow_sync_preload()` at start-up so the first requests already run what is published; the handler
carries on from what it loaded.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from rag.engine import WorkflowDefinition
from rag.provider import RuntimeGetter, get_runtime
from rag.runtime import BACKENDS, PipelineRuntime
from rag.workflows import selectors
from rag.workflows.graphs import graph_check

__all__ = [
    "WORKFLOWS_TOPIC",
    "WorkflowSync",
    "workflow_follow",
    "workflow_sync",
    "workflow_sync_enabled",
    "workflow_sync_forget",
    "workflow_sync_preload",
]

logger = logging.getLogger(__name__)

WORKFLOWS_TOPIC = "workflows.published"


@dataclass(frozen=True, slots=True)
class _Read:
    signature: Any  # PublishedSignature
    published: dict[str, Any] | None  # backend -> PublishedWorkflow, only when the signature changed


def _read(*, known_signature: Any) -> _Read:
    """On a thread: what is published, read whole only when its signature moved."""

    close_old_connections()
    try:
        signature = selectors.workflow_published_signature()
        if signature == known_signature:
            return _Read(signature, None)
        return _Read(signature, selectors.workflow_published())
    finally:
        # CONN_MAX_AGE = 0 under ASGI: this thread is not a request, so nothing else would close its connection.
        close_old_connections()


class WorkflowSync:
    """This worker's view of what is published: `follow(topic)` is the change feed's handler, `check()` one read."""

    def __init__(self, *, runtime_getter: RuntimeGetter | None = None) -> None:
        self._runtime_getter = runtime_getter or get_runtime
        self.loaded = asyncio.Event()
        self.applied: dict[str, tuple[int, int]] = {}  # backend -> (draft id, version) this worker runs
        self.switches = 0
        self._runtime: PipelineRuntime | None = None
        self._signature: Any = None
        self._lock = asyncio.Lock()

    async def follow(self, topic: str = WORKFLOWS_TOPIC) -> None:
        await self.check()

    async def check(self) -> bool:
        """Read what is published and apply any change; True when this worker switched a workflow."""
        async with self._lock:  # one check at a time: a switch half applied must not be read as the state
            return await self._check()

    async def _check(self) -> bool:
        runtime = self._runtime_getter()
        fresh_runtime = runtime is not self._runtime  # first check, or the runtime was rebuilt (reset_runtime)
        known_signature = None if fresh_runtime else self._signature
        try:
            result = await asyncio.to_thread(_read, known_signature=known_signature)
        except Exception:
            self.loaded.set()  # whoever waits for the first load must not hang on a database that is down
            raise  # the change feed logs it and runs this again
        switched = False
        if result.published is not None:
            switched = await self._apply(runtime, result.published)
        # Only now: had applying failed, the next check must see the change as still pending.
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
            result = _read(known_signature=None)
        except Exception as exc:
            logger.warning("reading the published workflows at start-up failed (%s); the change feed retries", exc)
            return False
        finally:
            close_old_connections()
        self._signature = result.signature
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


_sync: WorkflowSync | None = None  # this process's, made by the preload or the first change


def workflow_sync() -> WorkflowSync:
    """This process's sync (made on first use)."""
    global _sync
    if _sync is None:
        _sync = WorkflowSync()
    return _sync


async def workflow_follow(topic: str = WORKFLOWS_TOPIC) -> None:
    """The change feed's handler for `WORKFLOWS_TOPIC` (registered where the app is assembled)."""
    await workflow_sync().follow(topic)


def workflow_sync_preload() -> bool:
    """At server start-up, from sync code on the thread that will run the event loop (next to `warm_up()`):
    apply the published workflows before the first request, so a restarted worker never serves a stale one.
    The change feed's handler carries on from what this loaded."""
    if not workflow_sync_enabled():
        return False
    return workflow_sync().load_blocking()


def workflow_sync_forget() -> None:
    """Forget this process's sync (tests)."""
    global _sync
    _sync = None
