"""The Redis channel layer, with a receive that honours cancellation.

channels-redis waits for a message with a loop of blocking pops (`while content is None: await bzpopmin(...)`).
On Python 3.11 redis-py reads under `asyncio.timeout`, which can turn a cancellation arriving with the read into
an ordinary return; the loop then simply pops again, so a cancelled consumer (a client gone, a test's event loop
closing) kept waiting on Redis forever. Each pop goes through `infra.redis_calls.redis_call`, which raises
when the task is being cancelled: nothing is lost, the message stays in the layer's backup queue for the next
receive.
"""

from __future__ import annotations

from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer  # type: ignore[import-untyped]

from infra.redis_calls import redis_call

__all__ = ["RedisChannelLayer"]


class RedisChannelLayer(_RedisChannelLayer):
    async def _brpop_with_clean(self, index: int, channel: str, timeout: float) -> Any:  # noqa: ASYNC109 (its signature)
        return await redis_call(super()._brpop_with_clean(index, channel, timeout))
