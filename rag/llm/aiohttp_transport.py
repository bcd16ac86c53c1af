"""The openai SDK's aiohttp client (``LLM_HTTP_CLIENT=aiohttp``), failing with the httpx2 errors its default one raises.

The SDK's aiohttp extra (``openai.DefaultAioHttpClient``) reads a stream for about half the CPU of its default httpx
transport, but the error map of its vendored transport sends every ``aiohttp.ClientConnectionError`` to
``httpx2.ConnectTimeout``: a refused connection, a server that hangs up before replying and a reset became
``APITimeoutError`` (httpx: ``APIConnectionError``), and a reply that breaks HTTP (a bad status line or chunk header)
left the SDK as a bare ``aiohttp.ClientResponseError``, which the call policy does not classify at all. Here the
aiohttp failure behind each error is raised again as the httpx2 error httpx raises for the same failure, while
sending the request and while reading the body, so the SDK (`raw_post`, embeddings) and `RawEventStream` turn it
into the same ``APIConnectionError`` / ``APITimeoutError`` and the policy retries and reports it the same way.

One difference stays: with aiohttp's C parser, a bad chunk header after the first chunk leaves the read waiting
(aiohttp drops the connection's read timer and raises nothing), so the policy's gap timeout ends that call as
stalled (UpstreamTimeout) where httpx fails it as a connection error. No server we call sends one.

Imported only when that client is chosen, so the default stack never loads aiohttp.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx2
from aiohttp.http_exceptions import HttpProcessingError
from openai import DefaultAioHttpClient, Timeout

__all__ = ["aiohttp_client", "httpx_error"]

# The httpx2 error for each aiohttp failure; the first match wins, so subclasses come before their bases.
_HTTPX_ERRORS: tuple[tuple[type[BaseException], type[httpx2.TransportError]], ...] = (
    (aiohttp.ClientProxyConnectionError, httpx2.ProxyError),
    (aiohttp.ClientHttpProxyError, httpx2.ProxyError),
    (aiohttp.ConnectionTimeoutError, httpx2.ConnectTimeout),  # sock_connect, or the wait for a pooled connection
    (aiohttp.SocketTimeoutError, httpx2.ReadTimeout),  # sock_read: no byte for the read timeout
    (TimeoutError, httpx2.ReadTimeout),  # any other aiohttp timeout
    (aiohttp.ClientConnectorError, httpx2.ConnectError),  # refused, unreachable, no such host, TLS handshake
    (aiohttp.ServerDisconnectedError, httpx2.RemoteProtocolError),  # "Server disconnected without sending a response."
    (aiohttp.ClientPayloadError, httpx2.ReadError),  # the body broke off (closed or reset mid-stream)
    (aiohttp.ClientOSError, httpx2.ReadError),  # a socket error once connected (reset)
    (aiohttp.ClientConnectionError, httpx2.NetworkError),
    (aiohttp.InvalidURL, httpx2.UnsupportedProtocol),
    (aiohttp.ClientError, httpx2.RemoteProtocolError),  # a reply that is not valid HTTP/1.1
    (HttpProcessingError, httpx2.RemoteProtocolError),  # the same, raised bare by aiohttp's Python parser
)


def httpx_error(exc: BaseException, request: httpx2.Request | None = None) -> httpx2.TransportError | None:
    """The httpx2 error httpx raises for the aiohttp failure behind ``exc`` (raised by aiohttp, or the httpx2 error
    the SDK's transport made of it), or None when no aiohttp failure is behind it."""
    failure = exc.__cause__ if isinstance(exc, httpx2.HTTPError) else exc
    if not isinstance(failure, aiohttp.ClientError | HttpProcessingError | TimeoutError):
        return None
    for aiohttp_error, error in _HTTPX_ERRORS:
        if isinstance(failure, aiohttp_error):
            mapped = error(str(failure) or type(failure).__name__, request=request)
            mapped.__cause__ = failure
            return mapped
    return None  # a TimeoutError matches above; kept for the type checker


@contextlib.contextmanager
def _as_httpx_errors(request: httpx2.Request) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = httpx_error(exc, request)
        if mapped is None:
            raise
        raise mapped from mapped.__cause__


class _Body(httpx2.AsyncByteStream):
    """A response body whose read and close failures are raised as httpx2's."""

    def __init__(self, stream: httpx2.AsyncByteStream, request: httpx2.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors(self._request):
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        with _as_httpx_errors(self._request):
            await self._stream.aclose()


class _HttpxErrors(httpx2.AsyncBaseTransport):
    """Wraps the SDK's aiohttp transport: its failures, in the request and in the body, raised as httpx2's."""

    def __init__(self, transport: httpx2.AsyncBaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        with _as_httpx_errors(request):
            response = await self._transport.handle_async_request(request)
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _Body(response.stream, request)
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()


class _AioHttpClient(DefaultAioHttpClient):
    """``DefaultAioHttpClient`` (the SDK's defaults: limits, redirects) whose transports are wrapped.

    ``_init_transport`` / ``_init_proxy_transport`` are httpx's hooks for building a client's transports, the ones
    the SDK's aiohttp client overrides to build its own.
    """

    def _init_transport(self, *args: Any, **kwargs: Any) -> httpx2.AsyncBaseTransport:
        return _HttpxErrors(super()._init_transport(*args, **kwargs))

    def _init_proxy_transport(self, *args: Any, **kwargs: Any) -> httpx2.AsyncBaseTransport:
        return _HttpxErrors(super()._init_proxy_transport(*args, **kwargs))


def aiohttp_client(timeout: Timeout) -> httpx2.AsyncClient:
    """A new aiohttp-backed HTTP client for ``AsyncOpenAI(http_client=...)``; closing the SDK client closes it."""
    return _AioHttpClient(timeout=timeout)
