"""The Lua scripts behind the cluster-wide LLM permits: each runs atomically inside Redis, on Redis's clock.

Keys of one backend (``<prefix>:llm:<backend>:...``):

- ``holders``: sorted set, permit token -> lease expiry (ms). A permit is out while its lease runs; the worker
  holding it renews it every second, so a worker that dies gives its permits back when their leases run out.
- ``queue``: sorted set, waiter token -> priority score (priority, then the request's arrival).
- ``qtime``: sorted set, waiter token -> enqueue time (ms): FIFO order, and the starvation boost.
- ``wlease``: sorted set, waiter token -> lease expiry (ms): a dead worker's waiters leave the queue too.
- ``low``: sorted set, low-priority waiter token -> enqueue time (ms). A waiter whose priority score is positive (work
  done after an answer, such as its conversation summary) waits here rather than in ``queue``/``qtime``, and is
  served only when those are empty, in both modes: it never takes a permit ahead of a request's call.

A token is ``<worker id>|<uuid>``; a permit handed to a waiter is announced on ``<channel prefix><worker id>``.
Every script first drops expired leases, then hands free permits to the next waiters (FIFO by enqueue time, or
priority, ties in enqueue order, with the oldest waiter first once it has waited the starvation threshold), so the
queue moves even when the holder that should have released is gone.
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "ADOPT", "REFRESH", "RELEASE"]

# ARGV[1] limit, ARGV[2] lease ms, ARGV[3] starvation threshold ms, ARGV[4] priority mode (0/1),
# ARGV[5] grant channel prefix. Defines `now`, `expire()` and `grant()`.
_COMMON = """
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local threshold = tonumber(ARGV[3])
local prio = tonumber(ARGV[4])
local channel = ARGV[5]
local clock = redis.call('TIME')
-- ms with the microseconds as a fraction: arrivals in the same millisecond keep their order
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000

local function forget_waiter(token)
  redis.call('ZREM', KEYS[2], token)
  redis.call('ZREM', KEYS[3], token)
  redis.call('ZREM', KEYS[4], token)
  redis.call('ZREM', KEYS[5], token)
end

local function queue_waiter(token, score, enqueued)
  if score > 0 then
    redis.call('ZADD', KEYS[5], enqueued, token)
  else
    redis.call('ZADD', KEYS[2], score, token)
    redis.call('ZADD', KEYS[3], enqueued, token)
  end
  redis.call('ZADD', KEYS[4], now + lease, token)
end

local function queued()
  return redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[5])
end

local function expire()
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, token in ipairs(dead) do
    forget_waiter(token)
  end
end

-- The head of the priority queue; among waiters of equal score (same priority, requests arrived in the same ms),
-- the one queued first.
local function first_by_priority()
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local token = head[1]
  local ties = redis.call('ZRANGEBYSCORE', KEYS[2], head[2], head[2])
  if #ties > 1 then
    local best = tonumber(redis.call('ZSCORE', KEYS[3], token))
    for _, other in ipairs(ties) do
      local at = tonumber(redis.call('ZSCORE', KEYS[3], other))
      if at < best then
        token, best = other, at
      end
    end
  end
  return token
end

local function grant()
  local free = limit - redis.call('ZCARD', KEYS[1])
  while free > 0 do
    local token
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if #oldest == 0 then
      token = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
      if not token then
        return
      end
    else
      token = oldest[1]
      if prio == 1 and now - tonumber(oldest[2]) < threshold then
        token = first_by_priority()
      end
    end
    forget_waiter(token)
    redis.call('ZADD', KEYS[1], now + lease, token)
    redis.call('PUBLISH', channel .. string.match(token, '^(.*)|'), token)
    free = free - 1
  end
end
"""

# KEYS: holders, queue, qtime, wlease, low. ARGV[6] token, ARGV[7] priority score (positive: low priority), ARGV[8] 1
# to queue when no permit is free (0: only take a free one).
# Returns {granted (0/1), now ms (a string: Lua numbers come back as integers), holders, queued}.
ACQUIRE = (
    _COMMON
    + """
local token = ARGV[6]
expire()
grant()
if queued() == 0 and redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + lease, token)
  return {1, string.format('%.3f', now), redis.call('ZCARD', KEYS[1]), 0}
end
if ARGV[8] == '0' then
  return {0, string.format('%.3f', now), redis.call('ZCARD', KEYS[1]), queued()}
end
queue_waiter(token, tonumber(ARGV[7]), now)
return {0, string.format('%.3f', now), redis.call('ZCARD', KEYS[1]), queued()}
"""
)

# Release a permit or withdraw a waiter (whichever the token is: a waiter granted meanwhile is a holder).
# KEYS as ACQUIRE. ARGV[6] token. Returns 1 when the token held a permit.
RELEASE = (
    _COMMON
    + """
local token = ARGV[6]
local held = redis.call('ZREM', KEYS[1], token)
forget_waiter(token)
expire()
grant()
return held
"""
)

# Renew this worker's leases. ARGV[6] holder count H, then H holder tokens, then waiter tokens. Only leases still in
# Redis are renewed: a permit released meanwhile must not come back. Returns {granted waiter tokens, holder tokens
# Redis no longer has, waiter tokens it no longer has, every holder token in the cluster, cluster queue length}.
REFRESH = (
    _COMMON
    + """
local n = tonumber(ARGV[6])
local lost_holders, lost_waiters = {}, {}
for i = 7, 6 + n do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, ARGV[i]) == 0
      and not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    lost_holders[#lost_holders + 1] = ARGV[i]
  end
end
for i = 7 + n, #ARGV do
  local token = ARGV[i]
  if not redis.call('ZSCORE', KEYS[1], token) then
    if redis.call('ZSCORE', KEYS[4], token) then
      redis.call('ZADD', KEYS[4], now + lease, token)
    else
      lost_waiters[#lost_waiters + 1] = token
    end
  end
end
expire()
grant()
local granted = {}
for i = 7 + n, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    granted[#granted + 1] = ARGV[i]
  end
end
return {granted, lost_holders, lost_waiters, redis.call('ZRANGE', KEYS[1], 0, -1), queued()}
"""
)

# Count again what this worker still runs or waits for but Redis lost (leases that ran out while this worker was
# cut off, permits of the local share taken during an outage): a running call is counted even past the limit,
# since it is running; a waiter is queued again in its old place. ARGV[6] holder count H, then H holder tokens,
# then waiters as triples (token, priority score, enqueue ms).
ADOPT = (
    _COMMON
    + """
local n = tonumber(ARGV[6])
for i = 7, 6 + n do
  redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
end
for i = 7 + n, #ARGV, 3 do
  local token = ARGV[i]
  if not redis.call('ZSCORE', KEYS[1], token) then
    queue_waiter(token, tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  end
end
expire()
grant()
return redis.call('ZCARD', KEYS[1])
"""
)
