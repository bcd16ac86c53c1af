"""The shared SDK client: one per configuration and loop, no SDK retries, our timeouts, on the chosen HTTP stack."""

from __future__ import annotations

import asyncio

import pytest
from openai import AsyncOpenAI, DefaultAioHttpClient, Timeout

from rag.llm.client import ClientKey, aclose_clients, get_client
from rag.llm.config import HTTP_CLIENTS, HttpClient


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


@pytest.mark.parametrize("http_client", HTTP_CLIENTS)
async def test_the_keys_http_client_carries_the_same_timeouts(http_client: HttpClient) -> None:
    key = ClientKey("http://127.0.0.1:9/v1", "k", 2.0, 30.0, http_client)
    client = get_client(key)
    try:
        other: HttpClient = "aiohttp" if http_client == "httpx" else "httpx"
        assert get_client(ClientKey("http://127.0.0.1:9/v1", "k", 2.0, 30.0, other)) is not client
        assert client.max_retries == 0 and client.timeout.connect == 2.0 and client.timeout.read == 30.0  # type: ignore[union-attr]
        http = client._client  # the SDK's HTTP client: the timeouts reach the transport from it
        assert isinstance(http, DefaultAioHttpClient) is (http_client == "aiohttp")
        assert (http.timeout.connect, http.timeout.read) == (2.0, 30.0)
    finally:
        await aclose_clients()
    assert client.is_closed()
