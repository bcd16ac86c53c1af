"""A real HTTP peer on loopback that answers every OpenAI-style request with one canned reply.

For what the simulator will not do on purpose: answer a JSON-schema request with text that is not JSON, or
with a plan of its choosing. Plain asyncio, HTTP/1.1 with keep-alive, non-streaming replies only.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import TracebackType
from typing import Any, Self

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def chat_completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-canned",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "canned",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": USAGE,
    }


def response_object(content: str) -> dict[str, Any]:
    return {
        "id": "resp_canned",
        "object": "response",
        "created_at": int(time.time()),
        "model": "canned",
        "status": "completed",
        "output": [
            {
                "id": "msg_canned",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        ],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": USAGE["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": USAGE["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE["total_tokens"],
        },
    }


class CannedLLMServer:
    """``async with CannedLLMServer("not json") as server:`` then point an LLMConfig at ``server.base_url``."""

    def __init__(self, content: str) -> None:
        self.content = content
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            # Kept-alive client connections would leave their handlers waiting for a next request forever.
            for writer in self._connections.values():
                writer.close()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                request_line, *header_lines = head.split("\r\n")
                path = request_line.split(" ")[1]
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.loads(raw or b"{}")
                self.requests.append((path, body))
                document = (
                    response_object(self.content) if path.endswith("/responses") else chat_completion(self.content)
                )
                payload = json.dumps(document).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._connections.pop(task, None)
            writer.close()
