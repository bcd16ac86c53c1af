"""Request rate limits: exact sliding windows of the last minute, per process or shared by every worker in Redis.

A request is checked against several rules at once (its client's window, its address's window) and is counted in
all of them only when every one allows it, so a refused request uses up nothing.

- `SlidingWindowRateLimiter`: in this process. Each key keeps the timestamps of its requests within the window
  (at most its limit of them); keys whose window has emptied are evicted on a periodic sweep, and past `max_keys`
  the least recently seen key goes, so a scan from many addresses cannot grow memory without bound.
- `RedisRateLimiter`: the same windows in Redis (one sorted set per key, checked and counted by one Lua script on
  Redis's clock), so N workers allow the limit once, not N times. When Redis does not answer it falls back to a
  per-process limiter, with a warning, and returns to Redis when it answers.

Why no library: `limits` (the well-kept one, with a Redis moving window) checks and counts one key per call, so a
request refused by its address's window would still have used up its client's; and it brings its own Redis client
set-up, where this project gives every Redis call explicit socket timeouts. The script below is the whole window.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infra.redis_calls import redis_call

__all__ = ["WINDOW_SECONDS", "RateRule", "RedisRateLimiter", "SlidingWindowRateLimiter"]

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class RateRule:
    """At most `limit` requests per `window` seconds (a minute unless said) under `key` (0: unlimited)."""

    key: str
    limit: int
    window: float = WINDOW_SECONDS


class SlidingWindowRateLimiter:
    def __init__(
        self,
        limit_per_minute: int,
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
        # Most recently seen key last, so eviction under pressure takes the longest idle first.
        self._windows: OrderedDict[str, deque[float]] = OrderedDict()
        self._spans: dict[str, float] = {}  # each key's window length, in seconds
        self._lock = threading.Lock()

    def allow(self, key: str) -> tuple[bool, float]:
        """(allowed, retry_after_seconds) for one more request from `key` at this limiter's own limit."""
        return self.hit([RateRule(key, self.limit)])

    async def admit(self, rules: Sequence[RateRule]) -> tuple[bool, float]:
        """(allowed, retry_after_seconds) for one more request under every rule; counted only when allowed."""
        return self.hit(rules)

    def hit(self, rules: Sequence[RateRule]) -> tuple[bool, float]:
        rules = [rule for rule in rules if rule.limit > 0]
        if not rules:
            return True, 0.0
        now = self._clock()
        with self._lock:
            self._calls += 1
            if self._calls % self._sweep_every == 0:
                self._sweep(now)
            windows = [self._window(rule.key, now, rule.window) for rule in rules]
            full = [(rule, window) for rule, window in zip(rules, windows, strict=True) if len(window) >= rule.limit]
            if full:
                return False, max(0.0, max(window[0] + rule.window for rule, window in full) - now)
            for window in windows:
                window.append(now)
            return True, 0.0

    def _window(self, key: str, now: float, span: float) -> deque[float]:
        self._spans[key] = span
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = deque()
            while len(self._windows) > self._max_keys:
                evicted, _ = self._windows.popitem(last=False)
                self._spans.pop(evicted, None)
        else:
            self._windows.move_to_end(key)
        horizon = now - span
        while window and window[0] <= horizon:
            window.popleft()
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


# KEYS: one sorted set per rule. ARGV[1] a unique member, ARGV[2i] the limit and ARGV[2i + 1] the window (ms) of
# KEYS[i].
# Returns "0" when counted, else the seconds until the fullest window has room (a string: Lua numbers come back
# as integers).
_WINDOW_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local wait = 0
local full = false
for i, key in ipairs(KEYS) do
  local window = tonumber(ARGV[2 * i + 1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) >= tonumber(ARGV[2 * i]) then
    full = true
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #oldest > 0 then
      wait = math.max(wait, tonumber(oldest[2]) + window - now)
    end
  end
end
if full then
  return string.format('%.3f', math.max(wait, 1) / 1000)
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[1])
  redis.call('PEXPIRE', key, math.ceil(tonumber(ARGV[2 * i + 1])))
end
return '0'
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

    async def admit(self, rules: Sequence[RateRule]) -> tuple[bool, float]:
        from redis.exceptions import RedisError  # redis is heavy: see _script

        rules = [rule for rule in rules if rule.limit > 0]
        if not rules:
            return True, 0.0
        keys = [f"{self.prefix}:ratelimit:{rule.key}" for rule in rules]
        args: list[object] = [uuid.uuid4().hex]
        for rule in rules:
            args += [rule.limit, round(rule.window * 1000)]
        try:
            raw = await redis_call(self._script()(keys=keys, args=args), timeout=_REDIS_TIMEOUT)
        except (RedisError, OSError, TimeoutError) as exc:
            if not self._failing:
                logger.warning("rate limits: Redis unreachable (%s); each worker counts alone until it answers", exc)
                self._failing = True
            return self.fallback.hit(rules)
        if self._failing:
            logger.warning("rate limits: Redis answers again; the windows are shared by every worker again")
            self._failing = False
        wait = float(raw.decode() if isinstance(raw, bytes) else raw)
        return wait <= 0, wait
