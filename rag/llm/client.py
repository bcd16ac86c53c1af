"""One shared ``AsyncOpenAI`` per server configuration and event loop.

Sharing matters: each client owns an HTTP connection pool, and a new client per request would pay a TCP (and
TLS) handshake per call and leak sockets under load. The cache is also keyed by the running event loop because
an async connection pool is bound to the loop that opened its connections; Django management commands and
``async_to_sync`` run short-lived loops, and a client carried over from a dead loop fails on first use.

The SDK's own retries are off (``max_retries=0``): rag.llm.policy is the only retry loop, so attempts are
counted, rate-limited and slot-bounded in one place.

``ClientKey.http_client`` picks the HTTP stack (LLM_HTTP_CLIENT): the SDK's aiohttp one (rag.llm.aiohttp_transport,
the default: about half the CPU per streamed answer of the other, `docs/benchmarks/streaming_load.md`), or its own
default httpx transport, with the same timeouts and the same errors.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from dataclasses import dataclass, field

from openai import AsyncOpenAI, Timeout

from rag.llm.config import HttpClient

__all__ = ["ClientKey", "aclose_clients", "get_client", "make_client"]


@dataclass(frozen=True, slots=True)
class ClientKey:
    base_url: str
    api_key: str = field(repr=False)
    connect_timeout: float
    # Socket read/write/pool timeout: only a backstop, the policy enforces the real (first-token, gap, total)
    # timeouts itself with asyncio so it can tell them apart.
    io_timeout: float
    http_client: HttpClient = "aiohttp"


_lock = threading.Lock()
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[ClientKey, AsyncOpenAI]] = (
    weakref.WeakKeyDictionary()
)


def make_client(key: ClientKey) -> AsyncOpenAI:
    """A new, unshared client (callers own it and must close it)."""
    # openai.Timeout is httpx2.Timeout, the type this SDK's transport uses (a legacy httpx.Timeout is converted).
    timeout = Timeout(key.io_timeout, connect=key.connect_timeout)
    http_client = None
    if key.http_client == "aiohttp":
        from rag.llm.aiohttp_transport import aiohttp_client  # loads aiohttp only where an LLM client is made

        http_client = aiohttp_client(timeout)
    return AsyncOpenAI(
        base_url=key.base_url,
        api_key=key.api_key or "EMPTY",
        max_retries=0,
        timeout=timeout,
        http_client=http_client,
    )


def get_client(key: ClientKey) -> AsyncOpenAI:
    """The shared client for ``key`` on the running loop (call from async code)."""
    loop = asyncio.get_running_loop()
    with _lock:
        per_loop = _clients.setdefault(loop, {})
        client = per_loop.get(key)
        if client is None or client.is_closed():
            client = per_loop[key] = make_client(key)
        return client


async def aclose_clients() -> None:
    """Close and forget the running loop's clients (server shutdown, tests)."""
    loop = asyncio.get_running_loop()
    with _lock:
        clients = list(_clients.pop(loop, {}).values())
    for client in clients:
        await client.close()
