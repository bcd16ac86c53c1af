"""One change feed: how a committed change of live configuration reaches every worker.

A writer publishes a topic after its transaction commits (`publish_on_commit("workflows")`, as Zulip's
`send_event_on_commit`); a rolled-back transaction publishes nothing. Publishing bumps the topic's generation in the
database (`infra.models.ChangeGeneration`, the truth a worker reads when it may have missed a notice) and, with
Redis, in a key under the deployment's prefix, with a notice on one pub/sub channel.

Each worker runs one watcher (`change_watch_task`, started by `infra.worker_tasks.WorkerTasksMiddleware`) that
follows the generations and hands every changed topic to the handlers registered for it (`on_change`). With Redis
a notice arrives in milliseconds; the keys are read with one MGET every second and the table with one query every
few seconds as safety nets. Without Redis (or while it is down) the table is read twice a second. A publish made in
this process is dispatched here at once, without waiting for either.

A handler is told only the topic: it reads what it follows itself (a version, a revision, a signature) and applies
it, so a notice delivered twice or late costs one cheap read and never a wrong state. Handlers are async (run on
the loop) or sync (run on one of the watcher's threads), each bounded by its timeout; a crash or a timeout is
logged and the handler runs again after a backoff (what failed was not taken in), while the watcher carries on. A
change that arrives while a handler of its topic runs runs it once more afterwards, never twice at the same time.

Adding a kind of live configuration: a topic name, `publish_on_commit(topic)` where it is written, and
`on_change(topic, handler)` where the app is assembled (`chatbot/asgi.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, close_old_connections, connections, transaction
from django.db.models import F

from infra.models import ChangeGeneration
from infra.redis_calls import redis_call
from infra.redis_client import redis_config, redis_sync_client
from infra.worker_tasks import WorkerTask

__all__ = [
    "ChangeWatcher",
    "Handler",
    "Registry",
    "change_watch_enabled",
    "change_watch_start",
    "change_watch_stats",
    "change_watch_stop",
    "change_watch_task",
    "feed_channel",
    "feed_key",
    "on_change",
    "publish",
    "publish_on_commit",
    "registry",
    "subscriptions",
]

logger = logging.getLogger(__name__)

Handler = Callable[[str], Any]  # handler(topic): a coroutine function, or a plain one run on a thread

POLL_INTERVAL = 0.5  # the table read without Redis: a change reaches every worker within this
SAFETY_INTERVAL = 5.0  # the table read while Redis notices arrive
REDIS_CHECK_INTERVAL = 1.0  # the MGET of the generation keys while Redis notices arrive
DEFAULT_TIMEOUT = 10.0
RETRY_DELAY = 0.5
RETRY_MAX = 30.0
_TICK = 0.1  # longest the loop sleeps: bounds how late a finished read is looked at
_REDIS_TIMEOUT = 1.0
_HANDLER_THREADS = 4


def _always() -> bool:
    return True


def feed_channel(prefix: str) -> str:
    return f"{prefix}:changefeed"


def feed_key(prefix: str, topic: str) -> str:
    return f"{prefix}:changefeed:{topic}"


# ------------------------------------------------------------------------------------------------ handlers


@dataclass(eq=False)
class Subscription:
    topic: str
    handler: Handler
    timeout: float
    enabled: Callable[[], bool]
    name: str
    is_async: bool


class Registry:
    """Which handlers follow which topic. The process has one (`on_change`, `subscriptions`); tests make their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: list[Subscription] = []

    def on_change(
        self,
        topic: str,
        handler: Handler,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        enabled: Callable[[], bool] = _always,
    ) -> Callable[[], None]:
        """Call `handler(topic)` in this worker whenever `topic` changes (and once when the watcher starts).

        `enabled` is asked at each change (a setting that switches the feature off). Registering the same handler
        for the same topic again replaces it. Returns a function that unregisters it.
        """
        if not topic:
            raise ValueError("a change feed topic needs a name")
        name = getattr(handler, "__qualname__", repr(handler))
        subscription = Subscription(topic, handler, timeout, enabled, name, inspect.iscoroutinefunction(handler))
        with self._lock:
            self._subscriptions[:] = [s for s in self._subscriptions if not (s.topic == topic and s.handler == handler)]
            self._subscriptions.append(subscription)

        def unregister() -> None:
            with self._lock:
                if subscription in self._subscriptions:
                    self._subscriptions.remove(subscription)

        return unregister

    def subscriptions(self, topic: str | None = None) -> list[Subscription]:
        with self._lock:
            return [s for s in self._subscriptions if topic is None or s.topic == topic]


registry = Registry()
on_change = registry.on_change
subscriptions = registry.subscriptions


# ------------------------------------------------------------------------------------------------ publishing


def publish_on_commit(topic: str, *, using: str | None = None) -> None:
    """Publish `topic` once the current transaction commits (at once outside one); nothing if it rolls back."""
    transaction.on_commit(lambda: publish(topic), using=using, robust=True)


def publish(topic: str) -> None:
    """Bump `topic`'s generation now, in the table and in Redis, and dispatch it in this worker.

    Blocking (a database write, a Redis round trip): call from sync code, after the change committed; inside a
    transaction use `publish_on_commit`. Never raises: a failed bump is logged, and the other path still carries it.
    """
    _table_bump(topic)
    _redis_bump(topic)
    change_watch_task.call_soon(lambda watcher: watcher.dispatch((topic,)))


def _table_bump(topic: str) -> None:
    try:
        rows = ChangeGeneration.objects.filter(topic=topic)
        if rows.update(generation=F("generation") + 1):
            return
        try:
            with transaction.atomic():
                ChangeGeneration.objects.create(topic=topic, generation=1)
        except IntegrityError:  # created by another process meanwhile
            rows.update(generation=F("generation") + 1)
    except Exception as exc:
        logger.warning("change feed: %r not bumped in the database (%s); Redis alone carries it", topic, exc)


def _redis_bump(topic: str) -> None:
    url, prefix = redis_config()
    if not url:
        return
    try:
        client = redis_sync_client(url)
        generation = client.incr(feed_key(prefix, topic))
        client.publish(feed_channel(prefix), f"{generation} {topic}")
    except Exception as exc:
        logger.warning("change feed: %r not published to Redis (%s); workers read it from the database", topic, exc)


# ------------------------------------------------------------------------------------------------ the watcher


def _generations_read() -> dict[str, int]:
    """On the watcher's reader thread: every topic's generation, one query. The thread keeps its connection
    between reads (twice a second without Redis) and drops it after a failure."""
    try:
        return dict(ChangeGeneration.objects.values_list("topic", "generation"))
    except Exception:
        connections["default"].close()
        raise


def _handler_call(subscription: Subscription, topic: str) -> None:
    """On a handler thread: a sync handler, with a database connection of its own for the call."""
    close_old_connections()
    try:
        subscription.handler(topic)
    finally:
        close_old_connections()


@dataclass(eq=False)
class _Run:
    again: bool = False


@dataclass
class ChangeWatcher:
    """This worker's one watcher: `run()` until cancelled; `dispatch(topics)` on the loop's thread."""

    redis_url: str = ""
    prefix: str = "helpcentre"
    registry: Registry = field(default_factory=lambda: registry)
    poll_interval: float = POLL_INTERVAL
    safety_interval: float = SAFETY_INTERVAL
    redis_check_interval: float = REDIS_CHECK_INTERVAL
    retry_delay: float = RETRY_DELAY  # after a handler failed; doubled per failure in a row, up to RETRY_MAX
    dispatched: Counter[str] = field(default_factory=Counter)  # topic -> handler runs started
    failures: int = 0  # handler runs that raised or timed out
    table_reads: int = 0
    redis_checks: int = 0  # MGETs of the generations in Redis that answered

    def __post_init__(self) -> None:
        self._table: dict[str, int] | None = None  # generations last read from the table (None: not yet)
        self._redis: dict[str, int] = {}  # generations last seen in Redis
        self._runs: dict[Subscription, _Run] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._read: Future[dict[str, int]] | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._handlers: ThreadPoolExecutor | None = None
        self._client: Any = None
        self._pubsub: Any = None
        self._redis_failures = 0
        self._redis_retry_at = 0.0
        self._table_failures = 0

    @classmethod
    def from_settings(cls) -> ChangeWatcher:
        url, prefix = redis_config()
        return cls(redis_url=url, prefix=prefix)

    @property
    def listening(self) -> bool:
        """Whether Redis notices arrive (else the table is read every `poll_interval`)."""
        return self._pubsub is not None

    # -------------------------------------------------------------------------------------------- main loop

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="changefeed-read")
        self._handlers = ThreadPoolExecutor(max_workers=_HANDLER_THREADS, thread_name_prefix="changefeed")
        next_read = next_mget = loop.time()
        try:
            while True:
                reconnect = self.redis_url and self._pubsub is None and loop.time() >= self._redis_retry_at
                if reconnect and await self._redis_connect():
                    next_read = loop.time()  # what was published while nobody listened
                if self._pubsub is not None:
                    await self._receive(_TICK)
                else:
                    await asyncio.sleep(_TICK)
                now = loop.time()
                self._collect_read()
                if now >= next_read and self._read is None:
                    self._read = self._reader.submit(_generations_read)
                    next_read = now + (self.safety_interval if self._pubsub is not None else self.poll_interval)
                if self._pubsub is not None and now >= next_mget:
                    next_mget = now + self.redis_check_interval
                    await self._redis_check()
        finally:
            await self._close()

    async def _close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        self._runs.clear()
        if self._reader is not None:
            # The reader thread's connection is closed on that thread, behind a read in flight; bounded.
            closed = asyncio.wrap_future(self._reader.submit(connections.close_all))
            self._reader.shutdown(wait=False, cancel_futures=False)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closed, 1.0)
        if self._handlers is not None:
            self._handlers.shutdown(wait=False, cancel_futures=True)
        await self._redis_close()

    # -------------------------------------------------------------------------------------------- dispatch

    def dispatch(self, topics: Iterable[str]) -> None:
        """Run the handlers of each topic (on the loop's thread): at once, or after the run in progress."""
        loop = asyncio.get_running_loop()
        for topic in dict.fromkeys(topics):
            for subscription in self.registry.subscriptions(topic):
                if not subscription.enabled():
                    continue
                run = self._runs.get(subscription)
                if run is not None:
                    run.again = True
                    continue
                run = self._runs[subscription] = _Run()
                task = loop.create_task(self._handle(subscription, run), name=f"changefeed:{topic}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _handle(self, subscription: Subscription, run: _Run) -> None:
        failures = 0
        try:
            while True:
                run.again = False
                self.dispatched[subscription.topic] += 1
                if await self._call(subscription):
                    failures = 0
                    if not run.again:
                        return
                    continue
                # What failed is not taken in yet (a database blip, a timeout): run it again, backing off.
                failures += 1
                await asyncio.sleep(min(RETRY_MAX, self.retry_delay * 2 ** (failures - 1)))
        finally:
            if self._runs.get(subscription) is run:
                del self._runs[subscription]

    async def _call(self, subscription: Subscription) -> bool:
        """One run of a handler, bounded by its timeout; False when it failed or timed out (logged)."""
        topic, timeout = subscription.topic, subscription.timeout
        try:
            if subscription.is_async:
                await asyncio.wait_for(subscription.handler(topic), timeout)
                return True
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._handlers, _handler_call, subscription, topic)
            done, _ = await asyncio.wait({future}, timeout=timeout)
            while not done:  # a thread cannot be stopped: its next run waits for this one, and says so
                self.failures += 1
                logger.error("change feed: %s for %r still runs after %g s", subscription.name, topic, timeout)
                done, _ = await asyncio.wait({future}, timeout=timeout)
            future.result()
            return True
        except TimeoutError:
            self.failures += 1
            logger.error("change feed: %s for %r timed out after %g s", subscription.name, topic, timeout)
        except Exception:
            self.failures += 1
            logger.exception("change feed: %s for %r failed", subscription.name, topic)
        return False

    # -------------------------------------------------------------------------------------------- the table

    def _collect_read(self) -> None:
        read = self._read
        if read is None or not read.done():
            return
        self._read = None
        try:
            generations = read.result()
        except Exception as exc:
            self._table_failures += 1
            if self._table_failures == 1:  # once per streak: a database outage must not flood the log
                logger.warning("change feed: the generations are unreadable (%s); retrying", exc)
            return
        if self._table_failures:
            logger.info("change feed: the generations are readable again after %d failures", self._table_failures)
            self._table_failures = 0
        self.table_reads += 1
        known, self._table = self._table, generations
        if known is None:  # the first read: every handler takes in what it follows
            self.dispatch(s.topic for s in self.registry.subscriptions())
        else:
            self.dispatch(topic for topic, generation in generations.items() if known.get(topic) != generation)

    # -------------------------------------------------------------------------------------------- Redis

    async def _redis_connect(self) -> bool:
        import redis.asyncio as aioredis  # heavy (~150 ms): paid only by a process configured with Redis

        client = aioredis.Redis.from_url(
            self.redis_url, socket_timeout=_REDIS_TIMEOUT, socket_connect_timeout=_REDIS_TIMEOUT
        )
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await redis_call(pubsub.subscribe(feed_channel(self.prefix)), timeout=_REDIS_TIMEOUT * 2)
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            self._redis_failed(exc)
            for closable in (pubsub, client):
                with contextlib.suppress(Exception):
                    await redis_call(closable.aclose(), timeout=0.5)
            return False
        if self._redis_failures:
            logger.info("change feed: Redis is back")
        self._redis_failures = 0
        self._client, self._pubsub = client, pubsub
        return True

    def _redis_failed(self, exc: BaseException) -> None:
        self._redis_failures += 1
        delay = min(5.0, 0.5 * 2 ** (self._redis_failures - 1))
        self._redis_retry_at = asyncio.get_running_loop().time() + delay
        if self._redis_failures == 1:
            logger.warning("change feed: Redis unreachable (%s); reading the database meanwhile", exc)

    async def _receive(self, wait: float) -> None:
        import redis.asyncio as aioredis  # heavy: see _redis_connect

        try:
            message = await redis_call(self._pubsub.get_message(ignore_subscribe_messages=True, timeout=wait))
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            await self._redis_close()
            self._redis_failed(exc)
            return
        if message is None or message.get("type") != "message":
            return
        data = message["data"]
        generation, _, topic = (data.decode() if isinstance(data, bytes) else str(data)).partition(" ")
        if not topic or not generation.isdigit():
            logger.warning("change feed: ignoring a malformed notice %r", data)
            return
        if self._redis.get(topic) != int(generation):
            self._redis[topic] = int(generation)
            self.dispatch((topic,))

    async def _redis_check(self) -> None:
        """One MGET of the followed topics' generations: what a lost notice would have said."""
        import redis.asyncio as aioredis  # heavy: see _redis_connect

        topics = sorted({s.topic for s in self.registry.subscriptions()})
        if not topics:
            return
        try:
            values = await redis_call(
                self._client.mget([feed_key(self.prefix, t) for t in topics]), timeout=_REDIS_TIMEOUT
            )
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            await self._redis_close()
            self._redis_failed(exc)
            return
        self.redis_checks += 1
        changed = []
        for topic, value in zip(topics, values, strict=True):
            if value is None:
                continue
            generation = int(value)
            if topic in self._redis and self._redis[topic] != generation:
                changed.append(topic)
            self._redis[topic] = generation
        self.dispatch(changed)

    async def _redis_close(self) -> None:
        client, pubsub = self._client, self._pubsub
        self._client = self._pubsub = None
        # Bounded, CancelledError too: this also runs while the task is cancelled, and closing a pub/sub connection
        # mid-read can otherwise wait for the socket timeout.
        for closable in (pubsub, client):
            if closable is None:
                continue
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(0.5):
                    await closable.aclose()


# ------------------------------------------------------------------------------------------------ lifecycle


def change_watch_enabled() -> bool:
    """Whether any handler is registered and switched on: a process that follows nothing needs no watcher."""
    return any(s.enabled() for s in subscriptions())


change_watch_task: WorkerTask[ChangeWatcher] = WorkerTask(
    "change-feed",
    ChangeWatcher.from_settings,
    restart_delay=5.0,
    stop_timeout=5.0,
    enabled=change_watch_enabled,
    describe=lambda watcher: "Redis notices" if watcher.redis_url else "database reads",
)


def change_watch_start(watcher: ChangeWatcher | None = None) -> ChangeWatcher | None:
    """Start this process's watcher on the running loop, once; the watcher that runs (None while a crashed one
    waits for its restart). `watcher` is used only when none runs yet."""
    change_watch_task.start(None if watcher is None else lambda: watcher)
    return change_watch_task.running()


async def change_watch_stop() -> None:
    await change_watch_task.stop()


def change_watch_stats() -> dict[str, Any]:
    """What this worker's watcher did (for the console's per-worker stats); {} when it does not run."""
    watcher = change_watch_task.running()
    if watcher is None:
        return {}
    return {
        "listening": watcher.listening,
        "dispatched": dict(watcher.dispatched),
        "failures": watcher.failures,
        "table_reads": watcher.table_reads,
        "redis_checks": watcher.redis_checks,
    }
