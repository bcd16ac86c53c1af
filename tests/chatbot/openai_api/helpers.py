"""An OpenAI client's requests, driven through the ASGI application in-process."""

from __future__ import annotations

import json
from typing import Any

from channels.testing import ApplicationCommunicator

from tests.chatbot.helpers import EVENT_TIMEOUT, FIRST_EVENT_TIMEOUT, SseResponse, application, http_scope

COMPLETIONS = "/v1/chat/completions"
MODELS = "/v1/models"


def bearer(secret: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {secret}".encode())


def completion_body(question: str = "How do I reset my password?", **extra: Any) -> bytes:
    payload: dict[str, Any] = {"model": "chat", "messages": [{"role": "user", "content": question}], **extra}
    return json.dumps(payload, ensure_ascii=False).encode()


async def api_start(
    path: str, body: bytes = b"", *, secret: str | None = None, method: str = "POST"
) -> ApplicationCommunicator:
    headers = [(b"content-type", b"application/json")]
    if secret is not None:
        headers.append(bearer(secret))
    communicator = ApplicationCommunicator(application(), http_scope(method, path, headers=headers))
    await communicator.send_input({"type": "http.request", "body": body, "more_body": False})
    return communicator


async def api_request(path: str, body: bytes = b"", *, secret: str | None = None, method: str = "POST") -> SseResponse:
    """The whole response; the consumer must end the body and stop on its own."""
    communicator = await api_start(path, body, secret=secret, method=method)
    start = await communicator.receive_output(timeout=FIRST_EVENT_TIMEOUT)
    assert start["type"] == "http.response.start"
    chunks = []
    while True:
        message = await communicator.receive_output(timeout=EVENT_TIMEOUT)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    await communicator.wait(timeout=1)
    return SseResponse(start["status"], start.get("headers", []), b"".join(chunks))


def data_lines(body: bytes) -> list[str]:
    """The `data:` payloads of an OpenAI stream, in order (`[DONE]` included); every frame is one data line."""
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), "the stream must end at a frame boundary"
    payloads = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block
        payloads.append(block[6:])
    return payloads


def chunks_of(body: bytes) -> list[dict[str, Any]]:
    lines = data_lines(body)
    assert lines[-1] == "[DONE]" and lines.count("[DONE]") == 1
    return [json.loads(line) for line in lines[:-1]]
