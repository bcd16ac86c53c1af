"""Serving the simulator with daphne (already a project dependency) on one TCP endpoint."""

from __future__ import annotations

import functools
from collections.abc import Callable

from devtools.simulator.asgi_io import ABORT_EXTENSION, ASGIApp, Receive, Scope, Send

LISTEN_BACKLOG = 2048


def daphne_adapter(app: ASGIApp) -> ASGIApp:
    """Give the app what daphne lacks for a faithful LLM server: Nagle off, and a way to cut a connection.

    Daphne hands each app ``send = partial(server.handle_reply, protocol)``; the protocol is a twisted
    Request whose channel owns the TCP transport.

    - TCP_NODELAY: twisted leaves Nagle on, so the second small SSE chunk waits for the client's delayed
      ACK (~40 ms). uvicorn/asyncio, which vLLM runs on, disable Nagle; so do we.
    - Drop fault: plain ASGI cannot express "cut the connection", and an exception after the response has
      started trips daphne's application checker. Closing the transport flushes the bytes already written
      and ends the chunked body without its last chunk, which HTTP clients report as a broken response.
    """

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        protocol = send.args[0] if isinstance(send, functools.partial) and send.args else None
        transport = getattr(getattr(protocol, "channel", None), "transport", None)
        if scope["type"] == "http" and transport is not None:
            set_no_delay = getattr(transport, "setTcpNoDelay", None)
            if set_no_delay is not None:
                set_no_delay(True)
            extensions = {**(scope.get("extensions") or {}), ABORT_EXTENSION: {"abort": transport.loseConnection}}
            scope = {**scope, "extensions": extensions}
        await app(scope, receive, send)

    return wrapped


def serve(app: ASGIApp, *, host: str, port: int, ready: Callable[[], None] | None = None) -> bool:
    """Run daphne until SIGINT/SIGTERM. Returns False if the endpoint could not be bound."""
    # Imported here: daphne.server installs twisted's asyncio reactor as a side effect of import.
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server

    # Twisted's default listen backlog is 50: a burst of 100+ connections would see SYNs dropped and 1-3 s
    # connect retries, a latency the simulated engine never asked for. uvicorn (vLLM) uses 2048.
    endpoints = [f"{e}:backlog={LISTEN_BACKLOG}" for e in build_endpoint_description_strings(host=host, port=port)]
    server = Server(
        application=daphne_adapter(app),
        endpoints=endpoints,
        signal_handlers=True,
        verbosity=0,
        ready_callable=ready,
        server_name="llm-simulator",
    )
    server.run()
    return bool(server.listening_addresses)
