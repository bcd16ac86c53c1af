"""`redis_call`: a cancelled task stops even when redis.asyncio swallows the cancellation, against the real Redis
(`tests.concurrency.swallowed_cancel` swallows it on purpose). Each test would loop, or return normally, without
the helper."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from infra.redis_calls import redis_call, stop_if_cancelled
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.concurrency.swallowed_cancel import expect_cancelled, swallowing


@pytest.fixture
async def client() -> AsyncIterator[tuple[aioredis.Redis, str, str]]:
    url = suite_redis_url("the Redis cancellation guard")
    with fresh_prefix(url, "redis-calls") as prefix:
        redis = aioredis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=1)
        try:
            yield redis, prefix, url
        finally:
            await redis.aclose()


@pytest.mark.parametrize("raises", [False, True], ids=["swallowed-into-a-return", "swallowed-into-an-error"])
async def test_a_loop_of_blocking_pops_stops_when_cancelled(client, raises: bool) -> None:
    redis, prefix, _url = client
    started, give_up = asyncio.Event(), asyncio.Event()
    pops = 0

    async def consume() -> None:
        nonlocal pops
        while not give_up.is_set():  # as channels-redis waits for a message: pop again on an empty answer
            with contextlib.suppress(RedisConnectionError):  # a failing Redis is retried; a cancelled task is not
                await redis_call(swallowing(redis.blpop([f"{prefix}:queue"], timeout=1), started, raises=raises))
            pops += 1

    await expect_cancelled(asyncio.create_task(consume()), started, give_up.set)
    assert pops == 0


async def test_the_result_and_errors_pass_through_when_nobody_cancels(client) -> None:
    redis, prefix, _url = client
    await redis.rpush(f"{prefix}:queue", b"job")

    assert await redis_call(redis.blpop([f"{prefix}:queue"], timeout=1)) == (f"{prefix}:queue".encode(), b"job")
    with pytest.raises(TimeoutError):
        await redis_call(redis.blpop([f"{prefix}:empty"], timeout=2), timeout=0.05)
    stop_if_cancelled()  # nothing pending: no error


async def test_a_pending_cancellation_wins_over_a_result(client) -> None:
    redis, prefix, _url = client
    await redis.set(f"{prefix}:key", b"value")

    async def cancelled_meanwhile() -> bytes | None:
        current = asyncio.current_task()
        assert current is not None
        current.cancel()  # lands at the next await, which swallows it
        return await redis_call(swallowing(redis.get(f"{prefix}:key"), asyncio.Event()))

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(cancelled_meanwhile())


# ---------------------------------------------------------------------------------------------- its users


async def test_the_channel_layer_stops_receiving_when_cancelled(client, monkeypatch) -> None:
    from channels_redis.core import RedisChannelLayer as StockLayer  # type: ignore[import-untyped]

    from chatbot.channel_layer import RedisChannelLayer

    _redis, prefix, url = client
    hosts = [url]
    started = asyncio.Event()
    stock_pop = StockLayer._brpop_with_clean

    async def pop(self: StockLayer, index: int, channel: str, timeout: float) -> object:  # noqa: ASYNC109
        return await swallowing(stock_pop(self, index, channel, timeout), started)

    monkeypatch.setattr(StockLayer, "_brpop_with_clean", pop)
    layer = RedisChannelLayer(hosts=hosts, prefix=prefix)
    receiving = asyncio.create_task(layer.receive("answers"))

    async def give_up() -> None:  # a message ends the receive loop of a layer that ignored its cancellation
        await RedisChannelLayer(hosts=hosts, prefix=prefix).send("answers", {"type": "late"})

    try:
        await expect_cancelled(receiving, started, give_up)
    finally:
        await layer.flush()
        await layer.close_pools()


async def test_a_rate_limit_check_stops_when_cancelled(client) -> None:
    from infra.ratelimit import RateRule, RedisRateLimiter, SlidingWindowRateLimiter

    _redis, prefix, url = client
    limiter = RedisRateLimiter(url, prefix=prefix, fallback=SlidingWindowRateLimiter(0))
    started, blocked = asyncio.Event(), asyncio.Event()
    script = limiter._script()

    async def slow_script(**kwargs: object) -> object:
        await blocked.wait()  # the cancellation lands while "Redis" is reading
        return await script(**kwargs)

    limiter._script = lambda: lambda **kwargs: swallowing(slow_script(**kwargs), started)  # type: ignore[method-assign]
    checking = asyncio.create_task(limiter.admit([RateRule("client:a", 5)]))

    await expect_cancelled(checking, started, blocked.set)


class GaveUp(Exception):
    """Ends a loop that ignored its cancellation, so the test can fail instead of hanging."""


async def test_the_cluster_grant_listener_stops_when_cancelled(client, monkeypatch) -> None:
    from redis.asyncio.client import PubSub

    from concurrency.cluster.link import RedisLink

    _redis, prefix, url = client
    started, gave_up = asyncio.Event(), False
    stock_get = PubSub.get_message

    async def get_message(self: PubSub, *args: Any, **kwargs: Any) -> object:
        if gave_up:
            raise GaveUp
        return await swallowing(stock_get(self, *args, **kwargs), started)

    monkeypatch.setattr(PubSub, "get_message", get_message)
    link = RedisLink(url, prefix=prefix, worker_id="worker-1", op_timeout=1.0)
    listening = asyncio.create_task(link.listen(lambda token: None, lambda exc: None))

    def give_up() -> None:
        nonlocal gave_up
        gave_up = True

    try:
        await expect_cancelled(listening, started, give_up)
    finally:
        await link.close()


async def test_a_stream_store_read_stops_when_cancelled(client, monkeypatch) -> None:
    from chatbot.replay.redis_store import RedisStreamStore

    _redis, prefix, url = client
    store = RedisStreamStore(url, prefix, retention_seconds=60, max_events=100)
    redis = store._redis()
    started, blocked = asyncio.Event(), asyncio.Event()
    stock_hget = redis.hget

    async def slow_hget(*args: object) -> object:
        await blocked.wait()  # the cancellation lands while "Redis" is reading
        return await stock_hget(*args)

    monkeypatch.setattr(redis, "hget", lambda *args: swallowing(slow_hget(*args), started))
    reading = asyncio.create_task(store.owner("req-1"))
    try:
        await expect_cancelled(reading, started, blocked.set)
    finally:
        await redis.aclose()
