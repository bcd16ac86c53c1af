"""Rate limits: exact sliding windows, in this process or shared by every worker in Redis. The one rate-limiting
mechanism of the project: visitors and addresses (the guard node), websites (`chatbot.sites`), API keys
(`chatbot.apikeys`) and the LLM's requests per minute (`rag.llm.ratelimit`) all count here.

The algorithm: a rule allows `limit` requests in any `window` seconds (half-open: (t - window, t]). Each rule's key
keeps the start times it has granted, sorted. A request asks for a spot under several rules at once and waits at
most `max_wait` seconds for it:

- the earliest start that keeps every window under its limit is `now`, or, where a window already holds `limit`
  starts, a full window after the `limit`-th most recent one (the latest of those over the rules);
- if that start is more than `max_wait` away, the request is refused with the wait (its `retry_after`), counted
  nowhere: a request refused by its address's window uses up nothing of its client's;
- else the start is booked in every rule's window, now or in the future: a booking is a reservation, so waiters
  queue in arrival order, know at once whether their wait fits, and need no wake-up between them.

Refusing callers (visitors, websites, API keys) ask with `max_wait` 0: `admit` and `hit`, (allowed, retry_after).
A waiting caller (the LLM's requests per minute) books with the wait it can afford (`book`), sleeps until its
start (`wait_for_spot`) and gives the spot back if it is cancelled meanwhile (`give_back`).

- `SlidingWindowRateLimiter`: in this process, on its clock. Keys whose window has emptied are evicted on a
  periodic sweep, and past `max_keys` the least recently seen key goes, so a scan from many addresses cannot grow
  memory without bound.
- `RedisRateLimiter`: the same windows in Redis (one sorted set per key under `<prefix>:ratelimit:`, checked and
  booked by one Lua script on Redis's clock), so N workers allow the limit once, not N times. When Redis does not
  answer it counts in its per-process `fallback` (one warning), and returns to Redis when it answers (another).
  Both an async face (the event loop) and a sync one (a thread, e.g. the API key check beside its database read).

Why no library: `limits` (the well-kept one, with a Redis moving window) checks and counts one key per call, so a
request refused by its address's window would still have used up its client's, and it has no reservations; and it
brings its own Redis client set-up, where this project gives every Redis call explicit socket timeouts.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from infra.redis_calls import redis_call

__all__ = [
    "WINDOW_SECONDS",
    "Admission",
    "Booking",
    "RateLimiter",
    "RateRule",
    "RedisRateLimiter",
    "SlidingWindowRateLimiter",
    "rate_limiter_for",
    "wait_for_spot",
]

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60.0
# A wait no caller can afford, in place of an infinite one (Redis takes numbers, not infinity).
_LONGEST_WAIT = 10.0 * 365 * 24 * 3600


@dataclass(frozen=True, slots=True)
class RateRule:
    """At most `limit` requests per `window` seconds (a minute unless said) under `key` (0: unlimited)."""

    key: str
    limit: int
    window: float = WINDOW_SECONDS


class Admission(NamedTuple):
    """A refusing caller's answer: allowed (and counted), or not and `retry_after` seconds until it could be."""

    allowed: bool
    retry_after: float


@dataclass(frozen=True, slots=True)
class Booking:
    """A spot asked for with a wait: booked `wait` seconds from now, or refused (`wait`: until one would be free).

    `ticket` names the booking in Redis; `start` is its time in a process's windows (None when it is in Redis)."""

    allowed: bool
    wait: float
    ticket: str = ""
    start: float | None = None

    def admission(self) -> Admission:
        return Admission(self.allowed, 0.0 if self.allowed else self.wait)


class RateLimiter(Protocol):
    async def admit(self, rules: Sequence[RateRule], *, now: float | None = None) -> Admission:
        """One more request now under every rule, counted only when allowed."""
        ...

    def hit(self, rules: Sequence[RateRule], *, now: float | None = None) -> Admission:
        """`admit` for a caller on a thread (it may block for a Redis round trip)."""
        ...

    async def book(self, rules: Sequence[RateRule], *, max_wait: float) -> Booking:
        """The earliest spot under every rule, booked if it is at most `max_wait` seconds away."""
        ...

    async def give_back(self, rules: Sequence[RateRule], booking: Booking) -> None:
        """Free a booked spot (a waiter that gave up): later bookings stay where they are, which is safe."""
        ...


def _active(rules: Sequence[RateRule]) -> list[RateRule]:
    return [rule for rule in rules if rule.limit > 0]


class SlidingWindowRateLimiter:
    """The windows in this process. `limit_per_minute` is the limit of `allow(key)`; rules carry their own."""

    def __init__(
        self,
        limit_per_minute: int = 0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 50_000,
        sweep_every: int = 1024,
    ) -> None:
        if limit_per_minute < 0:
            raise ValueError("limit_per_minute must be >= 0 (0 means unlimited)")
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.limit = limit_per_minute
        self._clock = clock
        self._max_keys = max_keys
        self._sweep_every = max(1, sweep_every)
        self._calls = 0
        # Most recently seen key last, so eviction under pressure takes the longest idle first. Each window is
        # its sorted start times (bookings may lie in the future).
        self._windows: OrderedDict[str, list[float]] = OrderedDict()
        self._spans: dict[str, float] = {}  # each key's window length, in seconds
        self._lock = threading.Lock()  # `hit` runs on threads

    def allow(self, key: str) -> Admission:
        """One more request from `key` at this limiter's own limit."""
        return self.hit([RateRule(key, self.limit)])

    async def admit(self, rules: Sequence[RateRule], *, now: float | None = None) -> Admission:
        return self.hit(rules, now=now)

    def hit(self, rules: Sequence[RateRule], *, now: float | None = None) -> Admission:
        return self.take(rules, max_wait=0.0, now=now).admission()

    async def book(self, rules: Sequence[RateRule], *, max_wait: float) -> Booking:
        return self.take(rules, max_wait=max_wait)

    async def give_back(self, rules: Sequence[RateRule], booking: Booking) -> None:
        self.release(rules, booking)

    def take(self, rules: Sequence[RateRule], *, max_wait: float, now: float | None = None) -> Booking:
        """The algorithm of the module docstring, in this process."""
        rules = _active(rules)
        if not rules:
            return Booking(True, 0.0)
        now = self._clock() if now is None else now
        with self._lock:
            self._calls += 1
            if self._calls % self._sweep_every == 0:
                self._sweep(now)
            windows = [self._window(rule.key, now, rule.window) for rule in rules]
            start = now
            for rule, window in zip(rules, windows, strict=True):
                if len(window) >= rule.limit:
                    start = max(start, window[len(window) - rule.limit] + rule.window)
            wait = start - now
            if wait > max_wait:
                return Booking(False, wait)
            for window in windows:
                bisect.insort(window, start)
            return Booking(True, wait, start=start)

    def release(self, rules: Sequence[RateRule], booking: Booking) -> None:
        if not booking.allowed or booking.start is None:
            return
        with self._lock:
            for rule in _active(rules):
                window = self._windows.get(rule.key)
                if window is None:
                    continue
                index = bisect.bisect_left(window, booking.start)
                if index < len(window) and window[index] == booking.start:
                    del window[index]

    def _window(self, key: str, now: float, span: float) -> list[float]:
        self._spans[key] = span
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = []
            while len(self._windows) > self._max_keys:
                evicted, _ = self._windows.popitem(last=False)
                self._spans.pop(evicted, None)
        else:
            self._windows.move_to_end(key)
        drop = bisect.bisect_right(window, now - span)
        if drop:
            del window[:drop]
        return window

    def _sweep(self, now: float) -> None:
        spans = self._spans
        idle = [key for key, w in self._windows.items() if not w or w[-1] <= now - spans.get(key, WINDOW_SECONDS)]
        for key in idle:
            del self._windows[key]
            spans.pop(key, None)

    def __len__(self) -> int:
        """Keys currently tracked (for tests and stats)."""
        with self._lock:
            return len(self._windows)

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()
            self._spans.clear()
            self._calls = 0


# The algorithm in Redis. KEYS: one sorted set per rule (scores: start times in ms, members: tickets).
# ARGV[1] the ticket, ARGV[2] the longest wait (ms), ARGV[3] the time (ms; empty: Redis's clock), then per KEYS[i]
# ARGV[2i + 2] its limit and ARGV[2i + 3] its window (ms).
# Returns {1, wait} when booked `wait` seconds from now, {0, wait} when refused (strings: Lua numbers come back as
# integers).
_WINDOW_SCRIPT = """
local now
if ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
end
local start = now
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[2 * i + 2])
  local window = tonumber(ARGV[2 * i + 3])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count >= limit then
    local kth = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
    start = math.max(start, tonumber(kth[2]) + window)
  end
end
local wait = start - now
if wait > tonumber(ARGV[2]) then
  return {0, string.format('%.3f', math.max(wait, 1) / 1000)}
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, start, ARGV[1])
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, math.ceil(tonumber(last[2]) + tonumber(ARGV[2 * i + 3]) - now))
end
return {1, string.format('%.3f', wait / 1000)}
"""

_REDIS_TIMEOUT = 1.0


class RedisRateLimiter:
    """The windows in Redis under `<prefix>:ratelimit:<key>`, shared by every worker; per process while Redis is
    unreachable (`fallback`)."""

    def __init__(self, url: str, *, prefix: str, fallback: SlidingWindowRateLimiter) -> None:
        self.url = url
        self.prefix = prefix
        self.fallback = fallback
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        self._sync: Any = None
        self._failing = False

    def _script(self) -> Any:
        # redis.asyncio connections belong to the loop that opened them: one client per loop.
        import redis.asyncio as aioredis  # heavy (~150 ms): paid only when a Redis rate limiter is configured

        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            client = aioredis.Redis.from_url(
                self.url, socket_timeout=_REDIS_TIMEOUT * 2, socket_connect_timeout=_REDIS_TIMEOUT
            )
            entry = self._clients[loop] = client.register_script(_WINDOW_SCRIPT)
        return entry

    def _sync_script(self) -> Any:
        import redis  # heavy: see _script

        if self._sync is None:
            client = redis.Redis.from_url(
                self.url, socket_timeout=_REDIS_TIMEOUT, socket_connect_timeout=_REDIS_TIMEOUT
            )
            self._sync = client.register_script(_WINDOW_SCRIPT)
        return self._sync

    def _call(self, rules: list[RateRule], ticket: str, max_wait: float, now: float | None) -> dict[str, Any]:
        args: list[object] = [ticket, min(max_wait, _LONGEST_WAIT) * 1000, "" if now is None else now * 1000]
        for rule in rules:
            args += [rule.limit, rule.window * 1000]
        return {"keys": [self._key(rule) for rule in rules], "args": args}

    def _key(self, rule: RateRule) -> str:
        return f"{self.prefix}:ratelimit:{rule.key}"

    async def admit(self, rules: Sequence[RateRule], *, now: float | None = None) -> Admission:
        return (await self._take(rules, max_wait=0.0, now=now)).admission()

    async def book(self, rules: Sequence[RateRule], *, max_wait: float) -> Booking:
        return await self._take(rules, max_wait=max_wait, now=None)

    def hit(self, rules: Sequence[RateRule], *, now: float | None = None) -> Admission:
        from redis.exceptions import RedisError  # redis is heavy: see _script

        active = _active(rules)
        if not active:
            return Admission(True, 0.0)
        try:
            raw = self._sync_script()(**self._call(active, uuid.uuid4().hex, 0.0, now))
        except (RedisError, OSError) as exc:
            self._unreachable(exc)
            return self.fallback.hit(active, now=now)
        return self._booking(raw, "").admission()

    async def _take(self, rules: Sequence[RateRule], *, max_wait: float, now: float | None) -> Booking:
        from redis.exceptions import RedisError  # redis is heavy: see _script

        active = _active(rules)
        if not active:
            return Booking(True, 0.0)
        ticket = uuid.uuid4().hex
        try:
            raw = await redis_call(self._script()(**self._call(active, ticket, max_wait, now)), timeout=_REDIS_TIMEOUT)
        except (RedisError, OSError, TimeoutError) as exc:
            self._unreachable(exc)
            return self.fallback.take(active, max_wait=max_wait, now=now)
        return self._booking(raw, ticket)

    async def give_back(self, rules: Sequence[RateRule], booking: Booking) -> None:
        """Free the booking where it was made; best effort (a spot left booked only makes later ones wait)."""
        from redis.exceptions import RedisError  # redis is heavy: see _script

        if booking.start is not None:
            self.fallback.release(rules, booking)
        elif booking.allowed and booking.ticket:
            client = self._script().registered_client
            keys = [self._key(rule) for rule in _active(rules)]
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await redis_call(self._zrem(client, keys, booking.ticket), timeout=_REDIS_TIMEOUT)

    @staticmethod
    async def _zrem(client: Any, keys: list[str], ticket: str) -> None:
        async with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrem(key, ticket)
            await pipe.execute()

    def _booking(self, raw: Any, ticket: str) -> Booking:
        if self._failing:
            logger.warning("rate limits: Redis answers again; the windows are shared by every worker again")
            self._failing = False
        booked, wait = raw
        wait = float(wait.decode() if isinstance(wait, bytes) else wait)
        return Booking(bool(int(booked)), wait, ticket=ticket if int(booked) else "")

    def _unreachable(self, exc: BaseException) -> None:
        if not self._failing:
            logger.warning("rate limits: Redis unreachable (%s); each worker counts alone until it answers", exc)
            self._failing = True


def rate_limiter_for(url: str, *, prefix: str, clock: Callable[[], float] = time.monotonic) -> RateLimiter:
    """Windows in Redis at `url` (shared by every worker, with a per-process fallback), else in this process."""
    local = SlidingWindowRateLimiter(clock=clock)
    return RedisRateLimiter(url, prefix=prefix, fallback=local) if url else local


async def wait_for_spot(
    limiter: RateLimiter,
    rules: Sequence[RateRule],
    *,
    max_wait: float,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> Booking:
    """Book the earliest spot within `max_wait` seconds and sleep until it; a refused booking is returned at once,
    without sleeping. A caller cancelled while it sleeps gives its spot back."""
    booking = await limiter.book(rules, max_wait=max_wait)
    if booking.allowed and booking.wait > 0:
        try:
            await sleep(booking.wait)
        except BaseException:
            await limiter.give_back(rules, booking)
            raise
    return booking
