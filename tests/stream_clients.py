"""Clients of a real server's answer streams, for end-to-end tests and scripts: SSE over httpx, and a small
WebSocket client (RFC 6455 over asyncio streams: text frames, ping answered with pong, the close code kept).

Each collects one answer's events as the server sent them, so a test can check the stream whole: seq 1..n with
no gap, exactly one terminal event, and the terminal last.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

TERMINAL = ("meta_summary", "error")
SSE_CHAT = "/api/v1/rag/ask/stream_chat"
WS_CHAT = "/ws/chat/"


@dataclass
class Answer:
    """One answer as a client saw it: HTTP status (SSE; 101 for a WebSocket), events, how the transport ended."""

    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""  # a refusal's JSON body (SSE)
    close_code: int | None = None  # a WebSocket's close code, when the server closed it
    error: str = ""  # what broke the transport, if anything did

    @property
    def terminals(self) -> list[dict[str, Any]]:
        return [event for event in self.events if event.get("channel") in TERMINAL]

    @property
    def terminal(self) -> dict[str, Any] | None:
        terminals = self.terminals
        return terminals[-1] if terminals else None

    def whole(self) -> bool:
        """seq 1..n without a gap, and exactly one terminal event, the last."""
        seqs = [event.get("seq") for event in self.events]
        return seqs == list(range(1, len(seqs) + 1)) and self.terminals == self.events[-1:] != []

    def describe(self) -> str:
        tail = [(e.get("seq"), e.get("channel"), e.get("code")) for e in self.events[-3:]]
        return (
            f"status={self.status} events={len(self.events)} terminals={len(self.terminals)} tail={tail} "
            f"close={self.close_code} error={self.error!r} body={self.body[:200]!r}"
        )


def sse_ask(base_url: str, question: str, *, read_seconds: float = 120.0, path: str = SSE_CHAT) -> Answer:
    """POST a question and read its SSE stream to the end (or until the connection breaks)."""
    timeouts = httpx.Timeout(read_seconds, connect=5.0)
    with httpx.stream("POST", base_url + path, json={"question": question}, timeout=timeouts) as response:
        answer = Answer(status=response.status_code, headers=dict(response.headers))
        try:
            if response.status_code != 200:
                answer.body = response.read().decode("utf-8", "replace")
                return answer
            for line in response.iter_lines():
                if line.startswith("data: "):
                    answer.events.append(json.loads(line[6:]))
        except httpx.HTTPError as exc:
            answer.error = repr(exc)
    return answer


async def asse_ask(
    base_url: str,
    question: str,
    *,
    read_seconds: float = 120.0,
    path: str = SSE_CHAT,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> Answer:
    """`sse_ask` for async callers (many streams at once); `read_seconds` bounds each read, `on_event` sees each
    event as it arrives."""
    timeouts = httpx.Timeout(read_seconds, connect=5.0)
    async with (
        httpx.AsyncClient(timeout=timeouts) as client,
        client.stream("POST", base_url + path, json={"question": question}) as response,
    ):
        answer = Answer(status=response.status_code, headers=dict(response.headers))
        try:
            if response.status_code != 200:
                answer.body = (await response.aread()).decode("utf-8", "replace")
                return answer
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    answer.events.append(json.loads(line[6:]))
                    if on_event is not None:
                        on_event(answer.events[-1])
        except httpx.HTTPError as exc:
            answer.error = repr(exc)
    return answer


# --- WebSocket ------------------------------------------------------------------------------------------------

TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA


class WebSocketClient:
    """A client-side WebSocket: enough of RFC 6455 for JSON text messages from a server that does not fragment."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.close_code: int | None = None

    @classmethod
    async def connect(cls, url: str, *, handshake_seconds: float = 5.0) -> WebSocketClient:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), handshake_seconds)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://{host}:{port}\r\n\r\n"
        )
        writer.write(request.encode("ascii"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), handshake_seconds)
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if " 101 " not in status_line + " ":
            writer.close()
            raise ConnectionError(f"WebSocket handshake refused: {status_line}")
        return cls(reader, writer)

    async def send_json(self, content: Any) -> None:
        await self._send(TEXT, json.dumps(content).encode())

    async def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 65536:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(header + mask + masked)
        await self.writer.drain()

    async def receive_json(self) -> Any | None:
        """The next text message, decoded; None once the server closed (its code in `close_code`)."""
        while True:
            first, second = await self.reader.readexactly(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await self.reader.readexactly(length)
            if opcode == TEXT:
                return json.loads(payload.decode("utf-8"))
            if opcode == PING:
                await self._send(PONG, payload)
            elif opcode == CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                with contextlib.suppress(OSError):
                    await self._send(CLOSE, payload[:2])
                return None

    async def close(self) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            if self.close_code is None:
                await self._send(CLOSE, struct.pack("!H", 1000))
        self.writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self.writer.wait_closed()


async def ws_ask(
    base_url: str,
    question: str,
    *,
    within: float = 120.0,
    linger: float = 0.2,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> Answer:
    """Ask over `ws/chat/` and read events until the terminal one, the server's close, or `within` seconds;
    after the terminal event, whatever comes within `linger` seconds (more events, the server's close).
    `on_event` sees each event as it arrives."""
    answer = Answer(status=101)
    url = base_url.replace("http://", "ws://", 1) + WS_CHAT
    try:
        socket = await WebSocketClient.connect(url)
    except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
        answer.status, answer.error = 0, repr(exc)
        return answer
    try:
        await socket.send_json({"type": "ask", "question": question})
        async with asyncio.timeout(within):
            while (event := await socket.receive_json()) is not None:
                answer.events.append(event)
                if on_event is not None:
                    on_event(event)
                if event.get("channel") in TERMINAL:
                    break
            if answer.terminal is not None:
                # whatever the server sends after the terminal (nothing, or its close) within a moment
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(linger):
                        while (event := await socket.receive_json()) is not None:
                            answer.events.append(event)
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
        answer.error = repr(exc)
    finally:
        answer.close_code = socket.close_code
        await socket.close()
    return answer


def sse_summary(base_url: str, question: str, *, read_seconds: float = 30.0) -> dict[str, Any]:
    """`sse_ask`, checked whole and answered: its meta_summary, with the answer's text under "text"."""
    answer = sse_ask(base_url, question, read_seconds=read_seconds)
    assert answer.status == 200 and answer.whole(), answer.describe()
    terminal = answer.terminal
    assert terminal is not None and terminal["channel"] == "meta_summary", terminal
    return {**terminal, "text": "".join(e.get("delta", "") for e in answer.events if e.get("channel") == "answer")}
