"""LLM_HTTP_CLIENT=aiohttp: every transport failure reaches the call policy as the same SDK error as on httpx, and a
streamed answer and a one-shot completion work end to end with the setting.

The failures come from real sockets: the simulator (a stream cut off, stalled or hung), a closed port, a port whose
accept queue is full, and a small server of bytes that breaks HTTP in the ways the simulator cannot (hanging up or
resetting before the reply, a bad status line, a reset mid-body).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from openai import APIConnectionError, APITimeoutError, AsyncOpenAI, DefaultAioHttpClient, OpenAIError

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess, free_port
from rag.errors import UpstreamError, UpstreamTimeout
from rag.llm import CallPolicyConfig, LLMBackend, LLMDelta
from rag.llm.client import ClientKey, get_client
from rag.llm.config import HttpClient
from rag.llm.policy import CallLabel, CallPolicy, StreamTimeouts
from rag.llm.streams import ChatStreamParser, RawEventStream
from rag.wiring import call_policy_config_from_settings, llm_config_from_settings
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory, on_each_http_client
from tests.rag.llm.test_policy_faults import stream_all

BODY = {"model": "sim-chat", "messages": USER, "stream": True}
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
_EVENT = json.dumps({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}).encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER 0)."""
    writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    await reader.readexactly(length)  # all of it: unread bytes would turn our close into a reset


# What the broken server does once it has read the request.
BROKEN: dict[str, Callable[[asyncio.StreamWriter], Awaitable[None]]] = {}


def broken(name: str) -> Callable[[Callable[[asyncio.StreamWriter], Awaitable[None]]], Any]:
    def register(reply: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> Any:
        BROKEN[name] = reply
        return reply

    return register


@broken("hangs up before replying")
async def _hang_up(writer: asyncio.StreamWriter) -> None:
    writer.close()


@broken("resets before replying")
async def _reset_first(writer: asyncio.StreamWriter) -> None:
    _reset(writer)


@broken("replies with a bad status line")
async def _bad_status(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HELLO THERE\r\n\r\n")
    await writer.drain()
    writer.close()


async def _one_event(writer: asyncio.StreamWriter) -> None:
    writer.write(_HEAD + _chunk(b"data: " + _EVENT + b"\n\n"))
    await writer.drain()
    await asyncio.sleep(0.1)  # the client reads the event before what follows


@broken("resets mid-stream")
async def _reset_mid_stream(writer: asyncio.StreamWriter) -> None:
    await _one_event(writer)
    _reset(writer)


@pytest.fixture
async def broken_server() -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    """``url = await broken_server(name)``: a base URL whose server reads each request and then does ``name``."""
    servers: list[asyncio.Server] = []

    async def start(name: str) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await _read_request(reader)
                await BROKEN[name](writer)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def failure(client: AsyncOpenAI) -> tuple[type[BaseException], str]:
    """How one chat stream, opened and read the worker's way, fails: the SDK error's exact class (APITimeoutError is
    an APIConnectionError, so isinstance would not tell them apart) and whether the ``request`` or the ``body``
    failed."""
    try:
        stream = await RawEventStream.open(client, "/chat/completions", BODY)
    except OpenAIError as exc:
        return type(exc), "request"
    try:
        async for _event in stream:
            pass
    except OpenAIError as exc:
        return type(exc), "body"
    finally:
        await stream.close()
    raise AssertionError("the stream did not fail")


# fault -> what httpx gives: the SDK's error, and what failed
SIMULATED = {
    "drop:3": (APIConnectionError, "body"),  # connection closed after 3 tokens, without the last chunk
    "drop:0": (APIConnectionError, "body"),  # ... after the headers, before any token
    "stall:3:30": (APITimeoutError, "body"),  # 3 tokens, then nothing past the read timeout
    "hang": (APITimeoutError, "body"),  # headers, then nothing past the read timeout
}
RAW = {
    "hangs up before replying": (APIConnectionError, "request"),
    "resets before replying": (APIConnectionError, "request"),
    "replies with a bad status line": (APIConnectionError, "request"),
    "resets mid-stream": (APIConnectionError, "body"),
}


@on_each_http_client
@pytest.mark.parametrize("fault", list(SIMULATED))
async def test_a_stream_cut_off_stalled_or_hung_fails_as_on_httpx(
    fault: str, http_client: HttpClient, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    await sim.afaults(fail_next=[fault])
    # A read timeout below the simulator's pace of failure: the transport's, not the policy's, fires.
    client = get_client(ClientKey(sim.base_url, "x", 5.0, 0.5, http_client))
    assert await failure(client) == SIMULATED[fault]


@on_each_http_client
@pytest.mark.parametrize("fault", list(RAW))
async def test_a_reply_that_breaks_http_fails_as_on_httpx(
    fault: str, http_client: HttpClient, broken_server: Callable[[str], Awaitable[str]], manager: object
) -> None:
    client = get_client(ClientKey(await broken_server(fault), "x", 5.0, 5.0, http_client))
    assert await failure(client) == RAW[fault]


@on_each_http_client
async def test_refused_and_unanswered_connections_fail_as_on_httpx(
    http_client: HttpClient, unanswered_port: int, manager: object
) -> None:
    refused = get_client(ClientKey(f"http://127.0.0.1:{free_port()}/v1", "x", 0.3, 5.0, http_client))
    assert await failure(refused) == (APIConnectionError, "request")
    unanswered = get_client(ClientKey(f"http://127.0.0.1:{unanswered_port}/v1", "x", 0.3, 5.0, http_client))
    assert await failure(unanswered) == (APITimeoutError, "request")


@on_each_http_client
@pytest.mark.parametrize(
    "fault", ["hangs up before replying", "resets before replying", "replies with a bad status line"]
)
async def test_the_policy_retries_a_reply_that_breaks_http_as_a_connection_error(
    fault: str, broken_server: Callable[[str], Awaitable[str]], make_backend: BackendFactory, attempts: AttemptLog
) -> None:
    backend = make_backend(base_url=await broken_server(fault), max_attempts=2)
    with pytest.raises(UpstreamError, match="connection error, 2 attempt") as info:
        await stream_all(backend)
    assert type(info.value) is UpstreamError
    assert attempts.outcomes == ["connection", "connection"]
    with pytest.raises(UpstreamError, match="connection error, 2 attempt"):
        await backend.complete(backend="chat", node="n", messages=USER)


@on_each_http_client
@pytest.mark.parametrize("fault", [name for name, (_, failed) in RAW.items() if failed == "body"])
async def test_the_policy_ends_a_stream_broken_mid_answer_without_retry(
    fault: str, broken_server: Callable[[str], Awaitable[str]], make_backend: BackendFactory, attempts: AttemptLog
) -> None:
    received: list[LLMDelta] = []
    with pytest.raises(UpstreamError, match=r"broke off mid-answer \(connection error"):
        async with contextlib.aclosing(
            make_backend(base_url=await broken_server(fault)).stream_answer(backend="chat", node="n", messages=USER)
        ) as deltas:
            async for delta in deltas:
                received.append(delta)
    assert [d.text for d in received] == ["Hi"]
    assert attempts.outcomes == ["failed_mid_stream"]


@on_each_http_client
@pytest.mark.parametrize(
    ("faults", "error", "outcomes"),
    [
        (["hang", "hang"], r"request timed out, 2 attempt", ["timeout", "timeout"]),
        (["stall:6:30"], r"broke off mid-answer \(request timed out", ["failed_mid_stream"]),
    ],
)
async def test_the_transports_read_timeout_is_a_timeout_to_the_policy(
    faults: list[str],
    error: str,
    outcomes: list[str],
    http_client: HttpClient,
    sim: SimulatorProcess,
    manager: LLMConcurrencyManager,
    attempts: AttemptLog,
) -> None:
    """The read timeout is the transport's backstop (the policy's own timeouts are longer here): when it fires, the
    policy sees APITimeoutError on both stacks."""
    await sim.afaults(fail_next=faults)
    client = get_client(ClientKey(sim.base_url, "x", 5.0, 0.5, http_client))
    policy = CallPolicy(CallPolicyConfig(max_attempts=2, backoff_base=0.01, jitter=False))

    async def open_stream() -> Any:
        return await RawEventStream.open(client, "/chat/completions", BODY)

    calls = policy.stream(
        CallLabel("chat", "n", "sim-chat", "stream"),
        open_stream,
        ChatStreamParser,
        StreamTimeouts(first_token=10.0, between_tokens=10.0, total=20.0),
    )
    with pytest.raises((UpstreamError, UpstreamTimeout), match=error) as info:
        async with contextlib.aclosing(calls) as deltas:
            async for _delta in deltas:
                pass
    assert type(info.value) is (UpstreamTimeout if faults[0] == "hang" else UpstreamError)
    assert attempts.outcomes == outcomes


async def test_with_llm_http_client_aiohttp_an_answer_streams_and_a_completion_returns(
    settings: Any, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    settings.LLM_BASE_URL = sim.base_url
    settings.LLM_CHAT_MODEL = settings.LLM_RESPONSES_MODEL = "sim-chat"
    settings.LLM_HTTP_CLIENT = "aiohttp"
    backend = LLMBackend(llm_config_from_settings(), call_policy_config_from_settings())
    assert backend.config.http_client == "aiohttp"

    deltas: list[LLMDelta] = []
    async with contextlib.aclosing(backend.stream_answer(backend="chat", node="n", messages=USER)) as stream:
        async for delta in stream:
            deltas.append(delta)
    result = await backend.complete(backend="responses", node="n", input="How do I reset my password?")

    assert [d.kind for d in deltas] == ["reasoning"] * 4 + ["answer"] * 12 + ["usage"]
    assert result.text.startswith("Summary: How do I reset my password") and result.usage.output_tokens == 16
    # Both went through the aiohttp stack (the SDK client's HTTP client), one client for the two calls.
    assert isinstance(backend._client()._client, DefaultAioHttpClient)
    stats = await sim.astats()
    assert stats["endpoints"]["chat"]["attempts"] == stats["endpoints"]["responses"]["attempts"] == 1
