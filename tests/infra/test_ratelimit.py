import asyncio
import contextlib
import logging
from collections.abc import Iterator

import pytest

from infra.ratelimit import RateLimiter, RateRule, RedisRateLimiter, SlidingWindowRateLimiter
from tests.concurrency.cluster_redis import fresh_prefix, suite_redis_url
from tests.fake_clock import FakeClock
from tests.servers import PrivateRedis


def test_allows_up_to_the_limit_then_says_when_to_retry():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(3, clock=clock)
    assert [limiter.allow("a")[0] for _ in range(3)] == [True, True, True]
    clock.now += 10
    allowed, retry_after = limiter.allow("a")
    assert not allowed
    assert retry_after == 50.0  # the first request leaves the window 60 s after it was made


def test_window_slides():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(2, clock=clock)
    limiter.allow("a")
    clock.now += 30
    limiter.allow("a")
    clock.now += 31  # the first request is now older than a minute
    assert limiter.allow("a") == (True, 0.0)
    assert limiter.allow("a")[0] is False


def test_keys_are_independent():
    limiter = SlidingWindowRateLimiter(1, clock=FakeClock())
    assert limiter.allow("a")[0]
    assert limiter.allow("b")[0]
    assert not limiter.allow("a")[0]


def test_refused_requests_are_not_counted():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(1, clock=clock)
    limiter.allow("a")
    for _ in range(10):
        limiter.allow("a")
    clock.now += 60.5
    assert limiter.allow("a")[0]


def test_zero_means_unlimited_and_keeps_no_state():
    limiter = SlidingWindowRateLimiter(0, clock=FakeClock())
    assert all(limiter.allow("a") == (True, 0.0) for _ in range(1000))
    assert len(limiter) == 0


def test_idle_keys_are_evicted_on_sweep():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(5, clock=clock, sweep_every=10)
    for i in range(9):
        limiter.allow(f"client-{i}")
    assert len(limiter) == 9
    clock.now += 61
    limiter.allow("late")  # the 10th call sweeps the nine idle keys
    assert len(limiter) == 1


def test_memory_is_bounded_by_max_keys():
    limiter = SlidingWindowRateLimiter(5, clock=FakeClock(), max_keys=100)
    for i in range(1000):
        limiter.allow(f"client-{i}")
    assert len(limiter) == 100
    # The most recent keys are the ones kept.
    assert limiter.allow("client-999") == (True, 0.0)


def test_a_request_refused_by_one_rule_uses_up_none():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(0, clock=clock)
    client, address = RateRule("client:a", 5), RateRule("address:x", 1)
    assert limiter.hit([client, address]) == (True, 0.0)
    assert limiter.hit([client, address])[0] is False
    # the refused request was not counted in the client's window: 4 more fit without the address rule
    assert [limiter.hit([client])[0] for _ in range(5)] == [True, True, True, True, False]


async def test_redis_windows_are_shared_by_every_worker():
    url = suite_redis_url("rate limits shared by workers")
    with fresh_prefix(url, "ratelimit") as prefix:
        workers = [RedisRateLimiter(url, prefix=prefix, fallback=SlidingWindowRateLimiter(0)) for _ in range(2)]
        rules = [RateRule("anonymous:203.0.113.7", 3)]
        outcomes = [(await workers[i % 2].admit(rules))[0] for i in range(6)]
        assert outcomes == [True, True, True, False, False, False]
        allowed, retry_after = await workers[0].admit(rules)
        assert not allowed and 0 < retry_after <= 60
        assert (await workers[1].admit([RateRule("anonymous:198.51.100.2", 3)]))[0] is True


async def test_a_redis_outage_falls_back_to_this_process_and_recovers(caplog: pytest.LogCaptureFixture):
    server = PrivateRedis()
    server.start()
    limiter = RedisRateLimiter(server.url, prefix="rl", fallback=SlidingWindowRateLimiter(0))
    rules = [RateRule("client:a", 2)]
    try:
        assert (await limiter.admit(rules))[0] is True
        server.stop()
        with caplog.at_level(logging.WARNING, logger="infra.ratelimit"):
            # this process still counts: two more fit in its own window, the third does not
            assert [(await limiter.admit(rules))[0] for _ in range(3)] == [True, True, False]
        assert "Redis unreachable" in caplog.text
        server.start()  # an empty Redis: one request counted there before the outage is gone with it
        assert [(await limiter.admit(rules))[0] for _ in range(3)] == [True, True, False]
        assert "answers again" in caplog.text
    finally:
        server.stop()


def test_a_rule_with_a_day_window_counts_a_day_beside_a_minute_rule():
    clock = FakeClock()
    limiter = SlidingWindowRateLimiter(0, clock=clock)
    day = [RateRule("site:a:day", 2, window=86400.0)]
    assert limiter.hit(day)[0] and limiter.hit(day)[0]
    clock.now += 3600
    allowed, retry_after = limiter.hit(day)
    assert not allowed and retry_after == pytest.approx(86400 - 3600)
    assert limiter.hit([RateRule("client:x", 1)])[0]  # a minute rule beside it is its own window
    clock.now += 86400
    assert limiter.hit(day)[0]


async def test_redis_counts_each_rule_in_its_own_window():
    url = suite_redis_url("rate windows of their own length")
    with fresh_prefix(url, "ratelimit") as prefix:
        limiter = RedisRateLimiter(url, prefix=prefix, fallback=SlidingWindowRateLimiter(0))
        day, minute = RateRule("site:day", 2, window=86400.0), RateRule("visitor", 5)
        assert (await limiter.admit([day, minute]))[0]
        assert (await limiter.admit([day, minute]))[0]
        allowed, retry_after = await limiter.admit([day, minute])
        assert not allowed and 86000 < retry_after <= 86400  # the day's window, not the minute's
        assert (await limiter.admit([minute]))[0]  # a refused request used up nothing of the other window


@contextlib.contextmanager
def limiter_under_test(kind: str) -> Iterator[tuple[RateLimiter, FakeClock | None]]:
    """One of the two implementations of the windows: this process's (on a fake clock), or Redis's (on its own)."""
    if kind == "process":
        clock = FakeClock()
        yield SlidingWindowRateLimiter(clock=clock), clock
        return
    url = suite_redis_url("rate windows in Redis")
    with fresh_prefix(url, "ratelimit") as prefix:
        yield RedisRateLimiter(url, prefix=prefix, fallback=SlidingWindowRateLimiter()), None


@pytest.mark.parametrize("kind", ["process", "redis"])
async def test_a_waiting_caller_books_the_earliest_spot_in_arrival_order_and_can_give_it_back(kind: str) -> None:
    with limiter_under_test(kind) as (limiter, _clock):
        rules = [RateRule("llm:chat", 2)]
        assert [(await limiter.book(rules, max_wait=0)).allowed for _ in range(2)] == [True, True]
        refused = await limiter.book(rules, max_wait=10)  # a minute away: more than it can wait, and not booked
        assert not refused.allowed and refused.wait == pytest.approx(60, abs=1)
        first, second = await limiter.book(rules, max_wait=100), await limiter.book(rules, max_wait=100)
        assert first.allowed and second.allowed
        assert first.wait == pytest.approx(60, abs=1) and second.wait == pytest.approx(60, abs=1)
        third = await limiter.book(rules, max_wait=200)  # the window a minute on is full too: two minutes
        assert third.allowed and third.wait == pytest.approx(120, abs=1)
        await limiter.give_back(rules, third)
        await limiter.give_back(rules, second)  # a waiter that gave up: the next one gets its spot
        again = await limiter.book(rules, max_wait=100)
        assert again.allowed and again.wait == pytest.approx(60, abs=1)
        # a refusing caller sees the bookings: nothing before a minute is out
        allowed, retry_after = await limiter.admit(rules)
        assert not allowed and retry_after == pytest.approx(120, abs=1)


@pytest.mark.parametrize("kind", ["process", "redis"])
def test_a_caller_on_a_thread_counts_in_the_same_windows(kind: str) -> None:
    with limiter_under_test(kind) as (limiter, _clock):
        rules = [RateRule("apikey:hc-abcdefgh", 2)]
        assert asyncio.run(limiter.admit(rules)).allowed
        assert limiter.hit(rules).allowed
        allowed, retry_after = limiter.hit(rules)
        assert not allowed and 59 < retry_after <= 60


async def test_bookings_fall_back_to_this_process_while_redis_is_down_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = PrivateRedis()
    server.start()
    limiter = RedisRateLimiter(server.url, prefix="rl", fallback=SlidingWindowRateLimiter())
    rules = [RateRule("llm:chat", 1)]
    try:
        assert (await limiter.book(rules, max_wait=0)).allowed
        server.stop()
        with caplog.at_level(logging.WARNING, logger="infra.ratelimit"):
            # this process's window: one spot now, the next a minute on, then none within the minute it may wait
            now, later = await limiter.book(rules, max_wait=100), await limiter.book(rules, max_wait=100)
            assert (now.allowed, now.wait) == (True, 0.0)
            assert later.allowed and later.wait == pytest.approx(60, abs=1)
            assert not (await limiter.book(rules, max_wait=100)).allowed
            await limiter.give_back(rules, later)  # given back where it was booked
            assert (await limiter.book(rules, max_wait=100)).allowed
        assert caplog.text.count("Redis unreachable") == 1
    finally:
        server.stop()
