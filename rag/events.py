"""The event schema and the writer through which nodes emit events.

Each event is one JSON object: {"source": "ask_stream", "request_id", "seq", "node", "channel", "stage", ...}.
`seq` counts 1, 2, 3 ... per stream with no gaps; every stream ends with exactly one terminal event
(`meta_summary`, or `error` with a code). The writer enforces both, whatever the nodes do.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

SOURCE = "ask_stream"
CHANNELS = ("status", "answer", "reasoning", "meta", "meta_summary", "error")
TERMINAL_CHANNELS = frozenset({"meta_summary", "error"})

Event = dict[str, Any]


class StreamClosed(Exception):
    """Raised when a node emits after the stream's terminal event."""


class EventChannel:
    """A single-producer, single-consumer event buffer.

    Ordinary events are bounded: a producer that gets `max_pending` events ahead of its consumer waits (at most
    `put_timeout` seconds) so a stalled client slows its own pipeline instead of growing memory. The terminal
    event never waits, so a run can always finish even when nobody reads.
    """

    __slots__ = ("_closed", "_items", "_max_pending", "_put_timeout", "_readable", "_space")

    def __init__(self, *, max_pending: int = 512, put_timeout: float = 30.0) -> None:
        self._items: deque[Event] = deque()
        self._readable = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._max_pending = max_pending
        self._put_timeout = put_timeout
        self._closed = False

    async def put(self, event: Event) -> None:
        if len(self._items) >= self._max_pending:
            self._space.clear()
            await asyncio.wait_for(self._space.wait(), self._put_timeout)
        self._items.append(event)
        self._readable.set()

    def put_terminal(self, event: Event) -> None:
        self._items.append(event)
        self._closed = True
        self._readable.set()

    async def get(self, max_wait: float) -> Event:
        """The next event; TimeoutError after `max_wait` seconds without one."""
        while not self._items:
            self._readable.clear()
            await asyncio.wait_for(self._readable.wait(), max_wait)
        event = self._items.popleft()
        if len(self._items) < self._max_pending:
            self._space.set()
        return event

    @property
    def closed(self) -> bool:
        return self._closed


class StreamWriter:
    """Numbers events, stamps them with the request id, and closes the stream exactly once."""

    __slots__ = ("_channel", "_seq", "request_id", "terminal")

    def __init__(self, request_id: str, channel: EventChannel) -> None:
        self.request_id = request_id
        self._channel = channel
        self._seq = 0
        self.terminal: Event | None = None

    def _make(self, node: str, channel: str, stage: str, payload: dict[str, Any]) -> Event:
        if self.terminal is not None:
            raise StreamClosed(f"stream {self.request_id} already ended with {self.terminal['channel']}")
        self._seq += 1
        event = {
            "source": SOURCE,
            "request_id": self.request_id,
            "seq": self._seq,
            "node": node,
            "channel": channel,
            "stage": stage,
        }
        if payload:
            event.update(payload)
        return event

    async def emit(self, node: str, channel: str, stage: str, **payload: Any) -> None:
        await self._channel.put(self._make(node, channel, stage, payload))

    async def status(self, node: str, stage: str, **payload: Any) -> None:
        await self._channel.put(self._make(node, "status", stage, payload))

    async def answer(self, node: str, delta: str) -> None:
        await self._channel.put(self._make(node, "answer", "delta", {"delta": delta}))

    async def reasoning(self, node: str, delta: str) -> None:
        await self._channel.put(self._make(node, "reasoning", "delta", {"delta": delta}))

    async def usage(self, node: str, usage: dict[str, int], **payload: Any) -> None:
        await self._channel.put(self._make(node, "meta", "usage", {"usage": usage, **payload}))

    def finish(self, summary: dict[str, Any]) -> Event:
        """The success terminal event; returns it."""
        event = self._make("END", "meta_summary", "final", summary)
        self.terminal = event
        self._channel.put_terminal(event)
        return event

    def fail(self, code: str, message: str, *, node: str = "END", **payload: Any) -> Event:
        """The error terminal event; a second terminal is ignored (the first one stands)."""
        if self.terminal is not None:
            return self.terminal
        event = self._make(node, "error", "error", {"code": code, "message": message, **payload})
        self.terminal = event
        self._channel.put_terminal(event)
        return event

    @property
    def seq(self) -> int:
        return self._seq
