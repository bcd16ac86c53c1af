"""A streamed response read as raw server-sent events, and the parsers that turn its chunks into LLMDelta, one
per API (a fresh parser per attempt).

The SDK's own stream builds a pydantic model of every chunk (a `ChatCompletionChunk` with its choices and delta),
most of whose fields nobody reads, and transforms the request's typed params recursively before sending them;
under load the two were a large part of a worker's CPU per answer. `RawEventStream` sends the same request through
the SDK's low-level `post` (so the URL, auth, status errors and timeouts stay the SDK's) and decodes each event's
JSON into a plain dict; the parsers read the few fields they need. They also accept the SDK's objects, which the
tests and non-streaming calls hand them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx2  # the openai SDK's HTTP library (openai.Timeout is httpx2's): its errors, mapped as the SDK does
from openai import APIConnectionError, APIError, APITimeoutError, AsyncOpenAI, OpenAIError

from rag.llm.types import LLMDelta
from rag.state import Usage

__all__ = [
    "ChatStreamParser",
    "RawEventStream",
    "ResponsesStreamParser",
    "StreamEventError",
    "chat_usage",
    "raw_post",
    "responses_usage",
    "sse_json_events",
]

_CONNECTION_ERRORS = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
_DRAIN_SECONDS = 1.0

# Where OpenAI-compatible servers put chat reasoning text: vLLM's reasoning parsers used `reasoning_content`
# (DeepSeek's name) and newer releases `reasoning`. The SDK keeps unknown fields as pydantic extras.
_CHAT_REASONING_FIELDS = ("reasoning_content", "reasoning")
_RESPONSES_REASONING_EVENTS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})


class StreamEventError(OpenAIError):
    """The server reported a failure inside the stream (an ``error`` / ``response.failed`` event).

    An OpenAIError so the policy treats it like the SDK's own errors: not retried (the server answered).
    """


async def sse_json_events(lines: AsyncIterator[str], request: httpx2.Request | None = None) -> AsyncIterator[Any]:
    """The JSON of each server-sent event in ``lines``, up to ``[DONE]``; an event whose JSON carries an ``error``
    raises APIError, as the SDK's own stream does. Comments, ``id:`` and ``retry:`` lines are skipped."""
    data: list[str] = []
    async for line in lines:
        if line:
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            continue
        if not data:
            continue
        payload = data[0] if len(data) == 1 else "\n".join(data)
        data.clear()
        if payload.startswith("[DONE]"):
            return
        yield _decoded(payload, request)
    if data:  # a last event the server did not end with a blank line
        payload = "\n".join(data)
        if not payload.startswith("[DONE]"):
            yield _decoded(payload, request)


def _decoded(payload: str, request: httpx2.Request | None) -> Any:
    try:
        value = json.loads(payload)
    except ValueError:
        raise StreamEventError(f"the stream sent an event that is not JSON ({payload[:80]!r})") from None
    if isinstance(value, dict) and value.get("error"):
        error = value["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise APIError(
            message if isinstance(message, str) and message else "An error occurred during streaming",
            request=request or _NO_REQUEST,
            body=error,
        )
    return value


# APIError wants the request; RawEventStream passes the real one.
_NO_REQUEST = httpx2.Request("POST", "http://llm.invalid/")


async def raw_post(client: AsyncOpenAI, path: str, body: Mapping[str, Any], *, stream: bool = False) -> httpx2.Response:
    """POST ``body`` as it is to ``path`` and return the raw reply (its body unread when ``stream``).

    The SDK's low-level ``post`` with ``cast_to=httpx.Response`` (its documented way to a raw response): the base
    URL, auth headers, timeouts and errors (APIStatusError with the server's message, APIConnectionError,
    APITimeoutError) are the SDK's, but the body skips its recursive transform of typed params (a JSON schema
    included) and the reply builds no pydantic model. The one place the chat and Responses calls reach the SDK,
    streamed (`RawEventStream`) or not (the backend's one-shot completions).
    """
    return await client.post(path, cast_to=httpx2.Response, body=dict(body), stream=stream)


class RawEventStream:
    """One streamed response's events as dicts; ``close()`` closes the connection (the server stops generating).

    Open it with ``await RawEventStream.open(client, "/chat/completions", body)``, sent by `raw_post`: the status
    errors and connect timeouts are the SDK's, while no chunk goes through its models. Transport failures while
    reading become APITimeoutError / APIConnectionError, as in the SDK's own stream, so the call policy classifies
    them the same way.
    """

    __slots__ = ("_response",)

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    @classmethod
    async def open(cls, client: AsyncOpenAI, path: str, body: Mapping[str, Any]) -> RawEventStream:
        """Send a streaming request (``body`` already holds ``stream: true``); raises on an error status."""
        return cls(await raw_post(client, path, body, stream=True))

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._events()

    async def _events(self) -> AsyncIterator[Any]:
        http = self._response
        lines = http.aiter_lines()
        try:
            async for event in sse_json_events(lines, http.request):
                yield event
        except httpx2.TimeoutException as exc:
            raise APITimeoutError(request=http.request) from exc
        except _CONNECTION_ERRORS as exc:
            raise APIConnectionError(request=http.request) from exc
        # After [DONE], read the body's end (HTTP/1.1's last chunk) so the connection goes back to the pool instead
        # of being closed; bounded, and a failure here loses nothing of the answer.
        with contextlib.suppress(TimeoutError, *_CONNECTION_ERRORS, httpx2.TimeoutException):
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for _line in lines:
                    pass

    async def close(self) -> None:
        await self._response.aclose()


def _get(obj: Any, name: str) -> Any:
    # A decoded event (dict) or one of the SDK's models (attributes; unknown fields are pydantic extras).
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def chat_usage(usage: Any) -> Usage:
    """rag Usage from a Chat Completions ``CompletionUsage`` (or its JSON)."""
    prompt, completion = _int(_get(usage, "prompt_tokens")), _int(_get(usage, "completion_tokens"))
    return Usage(prompt, completion, _int(_get(usage, "total_tokens")) or prompt + completion)


def responses_usage(usage: Any) -> Usage:
    """rag Usage from a Responses API ``ResponseUsage`` (or its JSON)."""
    prompt, completion = _int(_get(usage, "input_tokens")), _int(_get(usage, "output_tokens"))
    return Usage(prompt, completion, _int(_get(usage, "total_tokens")) or prompt + completion)


def _text_field(obj: Any, name: str) -> str:
    value = _get(obj, name)
    return value if isinstance(value, str) else ""


class ChatStreamParser:
    """``chat.completion.chunk`` events -> deltas. Only choice 0 is read (we always ask for one)."""

    def __init__(self) -> None:
        self.finished = False
        self.usage: Usage | None = None
        self.reasoning_field: str | None = None  # where the server put reasoning text, once it sent some

    def feed(self, chunk: Any) -> list[LLMDelta]:
        out: list[LLMDelta] = []
        usage = _get(chunk, "usage")
        if usage is not None:
            # The last usage seen wins: with vLLM's continuous_usage_stats every chunk carries running totals.
            self.usage = chat_usage(usage)
        for choice in _get(chunk, "choices") or ():
            if (_get(choice, "index") or 0) != 0:
                continue
            delta = _get(choice, "delta")
            if delta is not None:
                # Some servers send both fields with the same text; take the first one present, not both.
                field = next((f for f in _CHAT_REASONING_FIELDS if _text_field(delta, f)), None)
                if field is not None:
                    self.reasoning_field = field
                    out.append(LLMDelta("reasoning", _text_field(delta, field)))
                content = _text_field(delta, "content")
                if content:
                    out.append(LLMDelta("answer", content))
            if _get(choice, "finish_reason") is not None:
                self.finished = True
        return out


class ResponsesStreamParser:
    """Responses API stream events -> deltas; usage arrives with ``response.completed``."""

    def __init__(self) -> None:
        self.finished = False
        self.usage: Usage | None = None
        self.status = ""
        self.reasoning_field: str | None = None

    def feed(self, event: Any) -> list[LLMDelta]:
        kind = _text_field(event, "type")
        if kind == "response.output_text.delta":
            text = _text_field(event, "delta")
            return [LLMDelta("answer", text)] if text else []
        if kind in _RESPONSES_REASONING_EVENTS:
            text = _text_field(event, "delta")
            if text:
                self.reasoning_field = kind
            return [LLMDelta("reasoning", text)] if text else []
        if kind in ("response.completed", "response.incomplete"):
            # "incomplete" (max_output_tokens) is a finished, if truncated, answer: keep what was streamed.
            response = _get(event, "response")
            self.finished = True
            self.status = _text_field(response, "status") or kind.rsplit(".", 1)[-1]
            usage = _get(response, "usage")
            if usage is not None:
                self.usage = responses_usage(usage)
            return []
        if kind == "response.failed":
            error = _get(_get(event, "response"), "error")
            raise StreamEventError(f"response failed: {_text_field(error, 'code') or 'unknown error'}")
        if kind == "error":
            raise StreamEventError(f"stream error event: {_text_field(event, 'code') or 'unknown error'}")
        return []
