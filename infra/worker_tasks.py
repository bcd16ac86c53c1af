"""Per-worker background tasks: one asyncio task per process, started on the server's loop, restarted after a
crash, stopped with the server.

A `WorkerTask` owns one long-running `runner.run()` (live settings, workflow sync, the job runner). It is
loop-aware: the task belongs to the loop it was started on, and a new loop (a test's, or a server restarted in
the same process) gets a fresh one once the old loop is closed. A crash is logged and the task restarts by
itself after `restart_delay`, so a bug cannot spin; `stop()` cancels and waits, bounded by `stop_timeout`.

`WorkerTasksMiddleware` wraps the ASGI application and starts the tasks whose switch is on at the first
connection of any kind (daphne has no start-up hook) or at lifespan start-up (uvicorn), and stops them at
lifespan shutdown, or under daphne when its reactor shuts down (SIGTERM), since daphne sends no lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Runner", "WorkerTask", "WorkerTasksMiddleware"]

logger = logging.getLogger(__name__)


class Runner(Protocol):
    async def run(self) -> None: ...


R = TypeVar("R", bound=Runner)


def _always() -> bool:
    return True


class WorkerTask(Generic[R]):
    """One background task per process, running `factory().run()` on the loop that started it."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], R],
        *,
        restart_delay: float = 5.0,
        stop_timeout: float = 10.0,
        enabled: Callable[[], bool] = _always,
        describe: Callable[[R], str] | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.restart_delay = restart_delay
        self.stop_timeout = stop_timeout
        self.enabled = enabled  # the setting that switches it off, read by the middleware at each start
        self.describe = describe
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the task (or its pending restart) is on
        self._task: asyncio.Task[None] | None = None
        self._runner: R | None = None
        self._restart: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------------------------------------ public

    def start(self, factory: Callable[[], R] | None = None) -> asyncio.Task[None] | None:
        """Start the task on the running loop, once: later calls return the same task.

        `factory` (default: the task's own) makes the runner only when no task runs yet. Returns None while a
        crashed task waits for its restart (it restarts by itself).
        """
        loop = asyncio.get_running_loop()
        owner = self._loop
        if owner is not None and owner is not loop:
            task = self._task
            if task is not None and not task.done() and not owner.is_closed():
                raise RuntimeError(f"the {self.name} task already runs on another event loop")
            self._forget()  # that loop is gone: this one gets a fresh task
        if self._task is not None and not self._task.done():
            return self._task
        if self._restart is not None:
            return None
        return self._launch(loop, factory or self.factory)

    async def stop(self) -> None:
        """Cancel the task (and any pending restart) and wait for it to finish, at most `stop_timeout` seconds."""
        task = self._task
        self._forget()
        if task is None or task.done():
            return
        owner = task.get_loop()
        if owner is not asyncio.get_running_loop():
            if not owner.is_closed():  # not ours to await: it ends on its own loop
                with contextlib.suppress(RuntimeError):
                    owner.call_soon_threadsafe(task.cancel)
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=self.stop_timeout)
        if not done:
            logger.warning("%s did not stop within %g s; left cancelled", self.name, self.stop_timeout)
        elif not task.cancelled() and task.exception() is not None:
            logger.error("%s failed while stopping", self.name, exc_info=task.exception())
        else:
            logger.info("%s stopped", self.name)

    def running(self) -> R | None:
        """The runner of the task, if it runs."""
        task = self._task
        return self._runner if task is not None and not task.done() else None

    def call_soon(self, fn: Callable[[R], object]) -> bool:
        """From any thread: `fn(runner)` on the task's loop, if the task runs. False when it does not."""
        task, runner = self._task, self._runner
        if task is None or runner is None or task.done():
            return False
        loop = task.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(runner)
            return True
        try:
            loop.call_soon_threadsafe(fn, runner)
        except RuntimeError:  # the loop closed meanwhile
            return False
        return True

    # ------------------------------------------------------------------------------------------------ inside

    def _launch(self, loop: asyncio.AbstractEventLoop, factory: Callable[[], R]) -> asyncio.Task[None] | None:
        self._loop = loop
        try:
            runner = factory()
        except Exception as exc:
            self._crashed(loop, exc, "could not be created")
            return None
        task = loop.create_task(runner.run(), name=self.name)
        self._task, self._runner = task, runner
        task.add_done_callback(self._on_done)
        if self.describe is None:
            logger.info("%s started", self.name)
        else:
            logger.info("%s started (%s)", self.name, self.describe(runner))
        return task

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if task is not self._task:  # stopped (stop() forgot it first) or replaced
            return
        if task.cancelled():  # by someone else, e.g. the loop shutting down: not a crash
            return
        exc = task.exception()
        if exc is None:
            logger.warning("%s returned; it is started again on a later connection", self.name)
            return
        self._crashed(task.get_loop(), exc, "crashed")

    def _crashed(self, loop: asyncio.AbstractEventLoop, exc: BaseException, what: str) -> None:
        logger.error("%s %s; restarting in %g s", self.name, what, self.restart_delay, exc_info=exc)
        self._runner = None
        self._restart = loop.call_later(self.restart_delay, self._restart_now, loop)

    def _restart_now(self, loop: asyncio.AbstractEventLoop) -> None:
        self._restart = None
        if self._loop is loop:
            self._launch(loop, self.factory)

    def _forget(self) -> None:
        if self._restart is not None:
            self._restart.cancel()
        self._loop = self._task = self._runner = self._restart = None


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class WorkerTasksMiddleware:
    """ASGI wrapper starting `tasks` (those whose switch is on) on the first connection or at lifespan start-up.

    It answers the lifespan scope itself (Channels' ProtocolTypeRouter has no route for it): put it outermost.
    """

    def __init__(self, app: Any, tasks: Sequence[WorkerTask[Any]]) -> None:
        self.app = app
        self.tasks = tuple(tasks)
        self._hooked: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        self.start_all()
        await self.app(scope, receive, send)

    def start_all(self) -> None:
        for task in self.tasks:
            if task.enabled():
                task.start()
        loop = asyncio.get_running_loop()
        if self._hooked is not loop:
            self._hooked = loop
            _stop_with_twisted(loop, self.stop_all)

    async def stop_all(self) -> None:
        await asyncio.gather(*(task.stop() for task in self.tasks))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            # No timeout: the server sends shutdown when it ends, which may be weeks away.
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start_all()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop_all()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _stop_with_twisted(loop: asyncio.AbstractEventLoop, stop: Callable[[], Awaitable[None]]) -> None:
    """Under daphne (Twisted's asyncio reactor on this loop): stop the tasks before the reactor shuts down, so a
    SIGTERM lets them clean up (forget this worker in Redis, drop the job runner's heartbeat)."""
    reactor = sys.modules.get("twisted.internet.reactor")  # never imported here: that would install one
    if reactor is None or getattr(reactor, "_asyncioEventloop", None) is not loop:
        return
    from twisted.internet import defer  # twisted (~110 ms) is loaded only under daphne, the one caller here

    def before_shutdown() -> Any:
        return defer.Deferred.fromFuture(loop.create_task(stop()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
