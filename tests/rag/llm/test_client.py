"""The shared SDK client: one per configuration and loop, no SDK retries, our timeouts."""

from __future__ import annotations

import asyncio

from openai import AsyncOpenAI, Timeout

from rag.llm.client import ClientKey, aclose_clients, get_client


async def test_one_client_per_key_with_sdk_retries_off() -> None:
    key = ClientKey("http://127.0.0.1:9/v1", "secret", connect_timeout=2.0, io_timeout=30.0)
    client = get_client(key)
    try:
        assert get_client(ClientKey("http://127.0.0.1:9/v1", "secret", 2.0, 30.0)) is client
        assert get_client(ClientKey("http://127.0.0.1:9/v1", "other", 2.0, 30.0)) is not client
        assert client.max_retries == 0
        assert isinstance(client.timeout, Timeout)
        assert client.timeout.connect == 2.0 and client.timeout.read == 30.0
        assert "secret" not in repr(key)
    finally:
        await aclose_clients()
    assert client.is_closed()
    assert get_client(key) is not client
    await aclose_clients()


def test_each_event_loop_gets_its_own_client() -> None:
    # A pool's connections belong to the loop that opened them: a client must not outlive its loop's reuse.
    key = ClientKey("http://127.0.0.1:9/v1", "k", 2.0, 30.0)

    async def grab() -> AsyncOpenAI:
        client = get_client(key)
        assert get_client(key) is client
        return client

    first, second = asyncio.run(grab()), asyncio.run(grab())
    assert first is not second
    for client in (first, second):
        asyncio.run(client.close())
