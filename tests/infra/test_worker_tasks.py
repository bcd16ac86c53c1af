"""Per-worker background tasks: one per event loop, restarted after a crash, stopped within a timeout, and the
ASGI wrapper that starts them on the first connection and answers lifespan."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from infra.worker_tasks import WorkerTask, WorkerTasksMiddleware
from tests.asgi_doubles import receive_unused, send_unused
from tests.waiting import until


class Job:
    """A runner that runs until cancelled, or crashes at once; it records what happened to it."""

    def __init__(self, *, crash: bool = False, cleanup_seconds: float = 0.0, on_cancel: str = "end") -> None:
        self.crash = crash
        self.cleanup_seconds = cleanup_seconds
        self.on_cancel = on_cancel  # "end", "linger" (ignores the first cancel for 5 s) or "fail"
        self.started = False
        self.cleaned_up = False
        self.pokes: list[int] = []

    async def run(self) -> None:
        self.started = True
        try:
            if self.crash:
                await asyncio.sleep(0)
                raise RuntimeError("boom")
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if self.on_cancel == "linger":
                await asyncio.sleep(5)
            if self.on_cancel == "fail":
                raise RuntimeError("cleanup failed") from None
            raise
        finally:
            await asyncio.sleep(self.cleanup_seconds)
            self.cleaned_up = True

    def poke(self) -> None:
        self.pokes.append(threading.get_ident())


class Factory:
    """Makes Jobs; the first `crashes` of them crash, the first `failures` calls raise instead."""

    def __init__(self, *, crashes: int = 0, failures: int = 0, **job: Any) -> None:
        self.crashes = crashes
        self.failures = failures
        self.job = job
        self.calls = 0
        self.made: list[Job] = []

    def __call__(self) -> Job:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError("cannot make a job")
        job = Job(crash=len(self.made) < self.crashes, **self.job)
        self.made.append(job)
        return job


@pytest.fixture
async def stopped_after() -> AsyncIterator[list[WorkerTask[Job]]]:
    """WorkerTasks appended here are stopped at the end of the test, whatever it did."""
    tasks: list[WorkerTask[Job]] = []
    yield tasks
    for task in tasks:
        await task.stop()


# ------------------------------------------------------------------------------------------------ one per loop


async def test_start_runs_one_task_and_later_calls_return_it(stopped_after: list[WorkerTask[Job]]) -> None:
    factory = Factory()
    worker = WorkerTask("test-task", factory)
    stopped_after.append(worker)

    first = worker.start()
    second = worker.start()
    await until(lambda: bool(factory.made) and factory.made[0].started)

    assert first is not None and first is second
    assert first.get_name() == "test-task"
    assert factory.calls == 1
    assert worker.running() is factory.made[0]


async def test_a_start_with_its_own_factory_is_used_only_when_nothing_runs(
    stopped_after: list[WorkerTask[Job]],
) -> None:
    factory, other = Factory(), Factory()
    worker = WorkerTask("test-task", factory)
    stopped_after.append(worker)

    worker.start(other)
    worker.start(factory)

    assert (other.calls, factory.calls) == (1, 0)
    assert worker.running() is other.made[0]


def test_a_new_event_loop_gets_a_fresh_task_even_while_a_restart_was_pending() -> None:
    factory = Factory(crashes=1)
    worker = WorkerTask("test-task", factory, restart_delay=60.0)

    async def crash_on_this_loop() -> asyncio.Task[None] | None:
        task = worker.start()
        assert task is not None
        await asyncio.wait({task}, timeout=2)
        return worker.start()  # the restart waits a minute

    async def start_on_this_loop() -> asyncio.Task[None] | None:
        task = worker.start()
        await until(lambda: len(factory.made) == 2 and factory.made[1].started)
        assert worker.running() is factory.made[1]
        await worker.stop()
        return task

    assert asyncio.run(crash_on_this_loop()) is None
    assert asyncio.run(start_on_this_loop()) is not None
    assert factory.calls == 2
    assert factory.made[1].cleaned_up


async def test_a_task_running_on_another_live_loop_is_refused_and_reached_through_call_soon() -> None:
    factory = Factory()
    worker = WorkerTask("test-task", factory)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, name="other-loop", daemon=True)
    thread.start()

    async def start() -> None:
        worker.start()

    try:
        await asyncio.wait_for(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(start(), other)), 5)
        with pytest.raises(RuntimeError, match="another event loop"):
            worker.start()

        assert worker.call_soon(Job.poke) is True
        await until(lambda: bool(factory.made[0].pokes))
        assert factory.made[0].pokes == [thread.ident]  # ran on the task's own loop, not this one
    finally:
        await asyncio.wait_for(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(worker.stop(), other)), 5)
        other.call_soon_threadsafe(other.stop)
        await asyncio.to_thread(thread.join, 5)
        other.close()
    assert factory.made[0].cleaned_up
    assert worker.call_soon(Job.poke) is False  # nothing runs


# ------------------------------------------------------------------------------------------------ crashes


async def test_a_crashed_task_is_logged_and_restarted_after_the_delay(
    stopped_after: list[WorkerTask[Job]], caplog: pytest.LogCaptureFixture
) -> None:
    factory = Factory(crashes=1)
    worker = WorkerTask("test-task", factory, restart_delay=0.3)
    stopped_after.append(worker)
    loop = asyncio.get_running_loop()
    began = loop.time()

    with caplog.at_level(logging.INFO, logger="infra.worker_tasks"):
        first = worker.start()
        assert first is not None
        await asyncio.wait({first}, timeout=2)
        assert worker.running() is None
        assert worker.start() is None  # a connection during the delay does not restart it early
        await until(lambda: worker.running() is not None)
    restarted_after = loop.time() - began

    assert 0.3 <= restarted_after < 1.5
    assert factory.calls == 2 and worker.running() is factory.made[1]
    crash = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(crash) == 1 and "test-task crashed" in crash[0].getMessage()
    assert crash[0].exc_info is not None and str(crash[0].exc_info[1]) == "boom"
    assert sum("test-task started" in r.getMessage() for r in caplog.records) == 2


async def test_a_runner_that_cannot_be_made_is_tried_again_after_the_delay(
    stopped_after: list[WorkerTask[Job]], caplog: pytest.LogCaptureFixture
) -> None:
    factory = Factory(failures=1)
    worker = WorkerTask("test-task", factory, restart_delay=0.1)
    stopped_after.append(worker)

    with caplog.at_level(logging.ERROR, logger="infra.worker_tasks"):
        assert worker.start() is None
        await until(lambda: worker.running() is not None)

    assert factory.calls == 2
    assert [r.getMessage() for r in caplog.records] == ["test-task could not be created; restarting in 0.1 s"]


async def test_stopping_during_the_restart_delay_cancels_the_restart() -> None:
    factory = Factory(crashes=1)
    worker = WorkerTask("test-task", factory, restart_delay=0.1)
    first = worker.start()
    assert first is not None
    await asyncio.wait({first}, timeout=2)

    await worker.stop()
    await asyncio.sleep(0.3)  # a negative check, a fixed sleep: the restart due after 0.1 s does not come

    assert factory.calls == 1 and worker.running() is None
    assert worker.start() is not None  # a later start begins afresh, with no delay left to wait
    assert factory.calls == 2
    await worker.stop()


# ------------------------------------------------------------------------------------------------ stopping


async def test_stop_cancels_the_task_and_waits_for_its_cleanup(caplog: pytest.LogCaptureFixture) -> None:
    factory = Factory(cleanup_seconds=0.1)
    worker = WorkerTask("test-task", factory)
    task = worker.start()
    assert task is not None
    await until(lambda: factory.made[0].started)

    with caplog.at_level(logging.INFO, logger="infra.worker_tasks"):
        caplog.clear()
        await worker.stop()

    assert task.cancelled()
    assert factory.made[0].cleaned_up  # stop() returned only after the runner's own cleanup
    assert worker.running() is None
    assert [r.getMessage() for r in caplog.records] == ["test-task stopped"]
    await worker.stop()  # stopping twice is harmless


async def test_stop_gives_up_waiting_after_its_timeout(caplog: pytest.LogCaptureFixture) -> None:
    factory = Factory(on_cancel="linger")
    worker = WorkerTask("test-task", factory, stop_timeout=0.2)
    task = worker.start()
    assert task is not None
    await until(lambda: factory.made[0].started)
    loop = asyncio.get_running_loop()
    began = loop.time()

    with caplog.at_level(logging.WARNING, logger="infra.worker_tasks"):
        caplog.clear()
        await worker.stop()

    # What ended the wait: its timeout (the warning, and the task still lingering: it was not waited for to the end
    # of its 5 s), waited in full. One wall-clock bound.
    assert loop.time() - began >= 0.2
    assert not task.done() and worker.running() is None
    assert [r.getMessage() for r in caplog.records] == ["test-task did not stop within 0.2 s; left cancelled"]
    task.cancel()
    await asyncio.wait({task}, timeout=2)
    assert task.cancelled()


async def test_a_task_failing_while_it_stops_is_logged_and_not_restarted(caplog: pytest.LogCaptureFixture) -> None:
    factory = Factory(on_cancel="fail")
    worker = WorkerTask("test-task", factory, restart_delay=0.05)
    worker.start()
    await until(lambda: factory.made[0].started)

    with caplog.at_level(logging.ERROR, logger="infra.worker_tasks"):
        caplog.clear()
        await worker.stop()
        await asyncio.sleep(0.2)  # a negative check, a fixed sleep: no restart comes after the 0.05 s delay

    assert factory.calls == 1 and worker.running() is None
    assert [r.getMessage() for r in caplog.records] == ["test-task failed while stopping"]


# ------------------------------------------------------------------------------------------------ the middleware


async def test_the_middleware_starts_the_switched_on_tasks_on_the_first_connection(
    stopped_after: list[WorkerTask[Job]],
) -> None:
    switches = {"on": True, "off": False}
    factories = {name: Factory() for name in switches}

    def switch(name: str) -> Callable[[], bool]:
        return lambda: switches[name]

    workers = [WorkerTask(name, factories[name], enabled=switch(name)) for name in switches]
    stopped_after.extend(workers)
    calls: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        calls.append(scope["type"])

    wrapped = WorkerTasksMiddleware(app, workers)
    await wrapped({"type": "http"}, receive_unused, send_unused)
    await wrapped({"type": "websocket"}, receive_unused, send_unused)

    assert calls == ["http", "websocket"]
    assert workers[0].running() is factories["on"].made[0] and factories["on"].calls == 1
    assert workers[1].running() is None and factories["off"].calls == 0

    switches["off"] = True  # read at each connection
    await wrapped({"type": "http"}, receive_unused, send_unused)
    assert workers[1].running() is factories["off"].made[0]


async def test_the_middleware_answers_lifespan_and_stops_every_task_at_shutdown() -> None:
    factories = [Factory(cleanup_seconds=0.05), Factory(cleanup_seconds=0.05)]
    workers = [WorkerTask(f"task-{i}", factory) for i, factory in enumerate(factories)]
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue(maxsize=2)
    outbox: asyncio.Queue[dict[str, str]] = asyncio.Queue(maxsize=2)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:  # pragma: no cover - must not run
        raise AssertionError("lifespan reached the application")

    lifespan = asyncio.create_task(WorkerTasksMiddleware(app, workers)({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert await asyncio.wait_for(outbox.get(), 2) == {"type": "lifespan.startup.complete"}
    assert [w.running() for w in workers] == [f.made[0] for f in factories]

    await inbox.put({"type": "lifespan.shutdown"})
    assert await asyncio.wait_for(outbox.get(), 2) == {"type": "lifespan.shutdown.complete"}
    await asyncio.wait_for(lifespan, 2)
    assert [w.running() for w in workers] == [None, None]
    assert all(f.made[0].cleaned_up for f in factories)  # shutdown completed after each task cleaned up
