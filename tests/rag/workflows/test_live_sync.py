"""A worker's sync task: published drafts become the runtime's workflows, unpublishing returns the default."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from infra.changefeed import ChangeWatcher, Registry, change_watch_start, change_watch_stop, change_watch_task
from infra.worker_tasks import WorkerTasksMiddleware
from rag.deps import PipelineDeps
from rag.nodes import build_registry
from rag.runtime import AskRequest, PipelineRuntime
from rag.workflows import live, selectors, services
from rag.workflows.default import default_workflow
from tests.asgi_doubles import receive_unused, send_unused
from tests.rag.nodes.support import InMemoryRetriever
from tests.rag.workflows.conftest import LEAN_NODES, lean_graph
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


def make_runtime() -> PipelineRuntime:
    return PipelineRuntime(
        registry=build_registry(),
        deps_factory=lambda: PipelineDeps(retriever=InMemoryRetriever()),
        default_workflow=default_workflow(),
    )


def node_ids(runtime: PipelineRuntime, backend: str) -> list[str]:
    return [node.id for node in runtime.workflow_for(backend).nodes]


async def test_publish_and_unpublish_switch_the_runtime_and_precompile() -> None:
    runtime = make_runtime()
    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    assert await sync.check() is False  # nothing published: the default stays
    assert runtime.workflow_for("chat").name == "default"

    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph("lean"))
    await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="chat")
    assert await sync.check() is True
    assert node_ids(runtime, "chat") == list(LEAN_NODES)
    assert runtime.workflow_for("responses").name == "default"
    assert sync.applied == {"chat": (draft.pk, 1)}
    misses = runtime.graph_cache.misses
    await runtime.start(AskRequest(question="hello", backend="chat"))
    assert runtime.graph_cache.misses == misses  # compiled before the switch, not by the first request

    assert await sync.check() is False  # nothing changed, nothing done

    await sync_to_async(services.workflow_draft_unpublish)(draft_id=draft.pk)
    assert await sync.check() is True
    assert runtime.workflow_for("chat").name == "default"
    assert sync.applied == {}


async def test_a_run_in_flight_keeps_the_graph_it_started_with() -> None:
    runtime = make_runtime()
    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    await sync.check()
    before = await runtime.start(AskRequest(question="How do I reset my password?"))
    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
    await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="chat")
    await sync.check()
    after = await runtime.start(AskRequest(question="How do I reset my password?"))
    events_before = [e async for e in before.events()]
    events_after = [e async for e in after.events()]
    assert "cache_lookup" in {e["node"] for e in events_before}
    assert "cache_lookup" not in {e["node"] for e in events_after}
    assert events_before[-1]["channel"] == events_after[-1]["channel"] == "meta_summary"


async def test_a_rebuilt_runtime_gets_the_published_workflow_again() -> None:
    runtimes = [make_runtime()]
    sync = live.WorkflowSync(runtime_getter=lambda: runtimes[-1])
    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
    await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="responses")
    await sync.check()
    runtimes.append(make_runtime())  # reset_runtime() after a reindex builds a new one
    assert await sync.check() is True
    assert node_ids(runtimes[-1], "responses") == list(LEAN_NODES)


async def test_an_unchanged_publication_costs_one_small_read(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = make_runtime()
    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    reads: list[int] = []
    real_published = selectors.workflow_published

    def counted() -> dict:
        reads.append(1)
        return real_published()

    monkeypatch.setattr(selectors, "workflow_published", counted)
    await sync.check()
    assert len(reads) == 1
    for _ in range(3):
        await sync.check()
    assert len(reads) == 1  # the signature did not move: the drafts are not read again

    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
    await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="chat")
    assert await sync.check() is True
    assert len(reads) == 2
    assert node_ids(runtime, "chat") == list(LEAN_NODES)


@pytest.fixture
async def watcher(settings: Any) -> AsyncIterator[tuple[Registry, ChangeWatcher]]:
    """This process's change feed watcher on a registry of the test's own; the table read once, at start."""
    settings.REDIS_URL = ""
    registry = Registry()
    started = change_watch_start(ChangeWatcher(registry=registry, poll_interval=3600.0))
    assert started is not None
    yield registry, started
    await change_watch_stop()


async def test_a_publish_in_this_process_reaches_the_runtime_at_once(watcher, monkeypatch: pytest.MonkeyPatch) -> None:
    registry, _ = watcher
    runtime = make_runtime()
    switched = asyncio.Event()
    set_workflow = runtime.set_workflow

    def set_and_tell(backend: str, definition: Any) -> None:
        set_workflow(backend, definition)
        switched.set()

    monkeypatch.setattr(runtime, "set_workflow", set_and_tell)
    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    # An hour between the feed's table reads: only the publish's own dispatch can reach the sync within the test.
    registry.on_change(live.WORKFLOWS_TOPIC, sync.follow)
    await asyncio.wait_for(sync.loaded.wait(), 5)

    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
    await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="chat")

    await asyncio.wait_for(switched.wait(), 2)
    assert runtime.workflow_for("chat").name == "lean"


async def test_a_publish_by_another_process_arrives_through_the_feed(settings: Any) -> None:
    settings.REDIS_URL = ""
    runtime = make_runtime()
    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    registry = Registry()
    registry.on_change(live.WORKFLOWS_TOPIC, sync.follow)
    change_watch_start(ChangeWatcher(registry=registry, poll_interval=0.1))
    try:
        await asyncio.wait_for(sync.loaded.wait(), 5)
        draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
        # Another process published: the drafts and the topic's generation moved, nothing here was told.
        async with another_process():
            await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="chat")
        assert runtime.workflow_for("chat").name == "default"

        await until(lambda: runtime.workflow_for("chat").name == "lean", within=1.0)
    finally:
        await change_watch_stop()


@contextlib.asynccontextmanager
async def another_process() -> AsyncIterator[None]:
    """What is published meanwhile reaches this process's watcher only through the table, as from another one."""
    saved = change_watch_task.call_soon
    change_watch_task.call_soon = lambda fn: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        change_watch_task.call_soon = saved  # type: ignore[method-assign]


async def test_the_asgi_wrapper_starts_the_watcher_which_loads_what_is_published(
    settings: Any, monkeypatch: Any
) -> None:
    settings.RAG_WORKFLOW_SYNC = True
    settings.REDIS_URL = ""
    runtime = make_runtime()
    draft = await sync_to_async(services.workflow_draft_create)(name="lean", graph=lean_graph())
    await sync_to_async(services.workflow_draft_publish)(draft_id=draft.pk, backend="chat")
    calls: list[str] = []

    async def app(scope: dict, receive: object, send: object) -> None:
        calls.append(scope["type"])

    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    registry = Registry()
    registry.on_change(live.WORKFLOWS_TOPIC, sync.follow, enabled=live.workflow_sync_enabled)
    monkeypatch.setattr(change_watch_task, "factory", lambda: ChangeWatcher(registry=registry))
    monkeypatch.setattr(change_watch_task, "enabled", lambda: True)
    wrapped = WorkerTasksMiddleware(app, [change_watch_task])
    try:
        await wrapped({"type": "http"}, receive_unused, send_unused)
        watcher = change_watch_task.running()
        assert watcher is not None
        await wrapped({"type": "websocket"}, receive_unused, send_unused)
        assert change_watch_task.running() is watcher  # one watcher per process
        assert calls == ["http", "websocket"]
        await asyncio.wait_for(sync.loaded.wait(), 5)
        assert runtime.workflow_for("chat").name == "lean"
    finally:
        await change_watch_stop()


def test_preload_at_start_up_applies_what_is_published_before_any_request(settings: Any) -> None:
    settings.RAG_WORKFLOW_SYNC = True
    runtime = make_runtime()
    draft = services.workflow_draft_create(name="lean", graph=lean_graph())
    services.workflow_draft_publish(draft_id=draft.pk, backend="responses")
    sync = live.WorkflowSync(runtime_getter=lambda: runtime)
    assert sync.load_blocking() is True
    assert node_ids(runtime, "responses") == list(LEAN_NODES)
    assert runtime.workflow_for("chat").name == "default"
    # The task that takes over later has nothing left to do.
    assert asyncio.run(sync.check()) is False
