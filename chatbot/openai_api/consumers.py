"""`POST /v1/chat/completions` and `GET /v1/models[/<id>]`, as Channels consumers.

They extend the SSE transport's consumer (`chatbot.consumers.sse`), which keeps listening for `http.disconnect`
while the response streams: a client that goes away cancels its answer and frees its LLM slot within a second.

Status codes: a request is answered with its HTTP status as long as nothing has been sent, so an answer that fails
before its first token (`busy` -> 429 with `Retry-After`, `unavailable` -> 503, `timeout` -> 504) is an ordinary
OpenAI error the SDKs raise and retry by. A stream holds its 200 until the first token, at most
`status_hold_seconds`; an error after that is an `{"error": ...}` chunk (the SDKs raise it too), then
`data: [DONE]`.

A client's background task (a title, tags, follow-ups: `chatbot.openai_api.tasks`) is answered apart from the
pipeline (`chatbot.openai_api.task_answers`): no exchange, no recorded conversation, no cache, its own rate window.

Every refusal (4xx) is logged at WARNING with its status, code and message: what the client was told is what an
operator reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from chatbot import drain, lifecycle, security
from chatbot.apikeys.models import SCOPE_CHAT
from chatbot.apikeys.selectors import CheckedKey, KeyRefused, api_key_check, bearer_secret
from chatbot.apikeys.services import RateLimited, api_key_admit, api_key_authorise, api_key_tokens_add
from chatbot.consumers.common import stream_open
from chatbot.consumers.sse import Header, _StreamingHttpConsumer
from chatbot.openai_api.chunks import CompletionBuilder, usage_of
from chatbot.openai_api.errors import ApiError, api_error, error_from_event
from chatbot.openai_api.request import CompletionRequest, body_decode, completion_request_parse
from chatbot.openai_api.task_answers import TaskAnswer, client_task_answer
from chatbot.replay import LiveStream
from chatbot.streaming import BadRequest, exchange_open
from rag.events import TERMINAL_CHANNELS, Event
from rag.provider import get_runtime
from rag.runtime import BACKENDS
from rag.workflows.selectors import workflow_published

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
_background: set[asyncio.Task[Any]] = set()


def data_frame(content: Any) -> bytes:
    return f"data: {json.dumps(content, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


def _authorise(authorization: str, *, rate_limited: bool = True) -> CheckedKey:
    try:
        return api_key_authorise(authorization=authorization, scope=SCOPE_CHAT, rate_limited=rate_limited)
    except KeyRefused as exc:
        raise api_error(exc.code, exc.message) from None
    except RateLimited as exc:
        raise api_error("rate_limit_exceeded", exc.message, retry_after=exc.retry_after) from None


def _admit(authorization: str, body: bytes) -> tuple[CheckedKey, CompletionRequest]:
    """The key checked, the body read, then the request counted in its window (a question's or a task's)."""
    try:
        key = api_key_check(secret=bearer_secret(authorization), scope=SCOPE_CHAT)
    except KeyRefused as exc:
        raise api_error(exc.code, exc.message) from None
    request = completion_request_parse(body_decode(body), client_id=key.client_id)
    try:
        api_key_admit(key, task=request.task is not None)
    except RateLimited as exc:
        raise api_error("rate_limit_exceeded", exc.message, retry_after=exc.retry_after) from None
    return key, request


class _OpenAIConsumer(_StreamingHttpConsumer):
    """Errors in OpenAI's shape, no client cookie (a key says who the caller is)."""

    def _base_headers(self) -> list[Header]:
        return []

    def _authorization(self) -> str:
        return security.header_value(self.scope.get("headers") or [], "authorization") or ""

    async def _send_json_error(
        self, status: int, code: str, message: str, *, extra_headers: list[Header] | None = None, **extra: Any
    ) -> None:
        # The base class's refusals (405, 413) in OpenAI's shape.
        error = api_error(code, message)
        if 400 <= status < 500:
            logger.warning(
                "%s %s refused: %d %s: %s",
                self.scope.get("method", ""),
                self.scope.get("path", ""),
                status,
                code,
                message,
            )
        await self._send_json(status, error.body(), extra_headers)

    async def _send_error(self, error: ApiError) -> None:
        if 400 <= error.status < 500:
            path = self.scope.get("path", "")
            logger.warning(
                "%s %s refused: %d %s: %s", self.scope.get("method", ""), path, error.status, error.code, error.message
            )
        await self._send_json(error.status, error.body(), error.headers())


class ModelsConsumer(_OpenAIConsumer):
    """`GET /v1/models`: one model per backend, with the workflow it runs; `GET /v1/models/<id>`: one of them."""

    allowed_methods = ("GET",)

    async def _respond(self, body: bytes) -> None:
        try:
            models = await database_sync_to_async(self._models)(self._authorization())
        except ApiError as error:
            await self._send_error(error)
            return
        wanted = self._model_id()
        if not wanted:
            await self._send_json(200, {"object": "list", "data": models})
            return
        found = next((model for model in models if model["id"] == wanted), None)
        if found is None:
            await self._send_error(api_error("model_not_found", f"the model {wanted!r} does not exist", param="model"))
            return
        await self._send_json(200, found)

    @staticmethod
    def _models(authorization: str) -> list[dict[str, Any]]:
        # Not rate limited: clients (Open WebUI) list the models on every page load, and it costs no LLM call.
        _authorise(authorization, rate_limited=False)
        published = workflow_published()
        models = []
        for backend in BACKENDS:
            workflow = published.get(backend)
            models.append(
                {
                    "id": backend,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "helpcentre",
                    "workflow": {"name": workflow.name, "version": workflow.version} if workflow else "default",
                }
            )
        return models

    def _model_id(self) -> str:
        scope: Mapping[str, Any] = self.scope  # Channels' URL routing adds `url_route`, which HTTPScope does not list
        return str(scope.get("url_route", {}).get("kwargs", {}).get("model", ""))


class ChatCompletionsConsumer(_OpenAIConsumer):
    """`POST /v1/chat/completions`: one answer of the pipeline, streamed or whole."""

    # Clients send the whole conversation with every question (only its last turns are used).
    max_body_bytes = 1024 * 1024

    # How long a stream may hold its 200 back waiting for the first token, so that an answer refused or failed
    # before it (busy, unavailable, timeout) still gets its HTTP status. Past this the 200 goes out.
    status_hold_seconds = 10.0

    async def _respond(self, body: bytes) -> None:
        if lifecycle.is_draining():
            # This worker is stopping: the client asks again, and the proxy sends it to a worker that serves.
            message = "this worker is stopping; ask again"
            await self._send_error(api_error("unavailable", message, retry_after=lifecycle.retry_after_seconds()))
            return
        drain.transport_started()  # a drain waits for this response to send its end (an `unavailable` at worst)
        try:
            key, request = await database_sync_to_async(_admit)(self._authorization(), body)
            if request.task is not None:
                await self._answer_task(request)
                return
            exchange = await exchange_open(request.ask)
        except ApiError as error:
            await self._send_error(error)
            return
        except BadRequest as exc:
            await self._send_error(api_error("bad_request", str(exc)))
            return
        except Exception as exc:
            logger.exception("could not start a chat completion")
            await self._send_error(api_error("internal", f"internal error ({type(exc).__name__})"))
            return
        stream = stream_open(exchange, on_disconnect="cancel")
        relay = _Relay(self, request, stream)
        try:
            summary = await relay.run()
        finally:
            if not relay.ended:
                stream.transport_lost()  # the client went away (or sending failed): stop the answer now
        if summary is not None:
            _count_tokens(key, summary)

    async def _answer_task(self, request: CompletionRequest) -> None:
        """A client's background task: answered by the LLM or the rules, never by the pipeline, never recorded."""
        assert request.task is not None
        started = time.monotonic()
        deps = await get_runtime().deps()
        answer = await client_task_answer(request.task, backend=request.model, deps=deps)
        logger.info(
            "client task %s (%s) answered by %s in %.0f ms",
            request.task.kind,
            request.task.client,
            answer.answered_by,
            (time.monotonic() - started) * 1000,
        )
        builder = CompletionBuilder(model=request.model, request_id=uuid.uuid4().hex)
        summary = _task_summary(answer)
        builder.take({"channel": "answer", "delta": answer.text})
        if not request.stream:
            await self._send_json(200, builder.completion(summary))
            return
        frames = [
            builder.role_chunk(),
            builder.content_chunk(answer.text),
            builder.final_chunk(summary),
        ]
        if request.include_usage:
            frames.append(builder.usage_chunk(summary))
        await self.send_headers(
            status=200,
            headers=[(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")],
        )
        await self.send_body(b"".join(data_frame(frame) for frame in frames) + DONE, more_body=False)


def _task_summary(answer: TaskAnswer) -> Event:
    """What the completion builder needs of a task's answer: its usage (and no sources)."""
    usage = {
        "input_tokens": answer.prompt_tokens,
        "output_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }
    return {"channel": "meta_summary", "usage": usage, "sources": []}


def _count_tokens(key: CheckedKey, summary: Event) -> None:
    """Add the answer's tokens to the key's counter, off the response's path."""
    usage = usage_of(summary)
    tokens = int(usage["total_tokens"])
    if tokens <= 0:
        return
    estimated = bool(usage.get("estimated"))
    task = asyncio.create_task(
        database_sync_to_async(api_key_tokens_add)(key_id=key.id, tokens=tokens, estimated=estimated)
    )
    _background.add(task)
    task.add_done_callback(_background.discard)


class _Relay:
    """Forwards one stream's events to the client as a completion; returns the summary of a successful answer."""

    def __init__(self, consumer: ChatCompletionsConsumer, request: CompletionRequest, stream: LiveStream) -> None:
        self.consumer = consumer
        self.request = request
        self.stream = stream
        self.builder = CompletionBuilder(
            model=request.model, request_id=stream.request_id, base_url=settings.PUBLIC_BASE_URL
        )
        self.committed = False
        self.ended = False
        self.lock = asyncio.Lock()  # the hold timer and the relay both may send the 200

    async def run(self) -> Event | None:
        events = self.stream.tail(0)
        try:
            async with contextlib.aclosing(events):
                if self.request.stream:
                    return await self._streamed(events)
                return await self._whole(events)
        except Exception as exc:
            logger.exception("chat completion %s failed", self.stream.request_id)
            error = api_error("internal", f"internal error ({type(exc).__name__})")
            if self.committed:
                await self.consumer.send_body(data_frame(error.body()) + DONE, more_body=False)
            else:
                await self.consumer._send_error(error)
            self.ended = True
            return None

    async def _whole(self, events: AsyncGenerator[Event, None]) -> Event | None:
        async for event in events:
            self.builder.take(event)
            if event["channel"] not in TERMINAL_CHANNELS:
                continue
            self.ended = True
            if event["channel"] == "error":
                await self.consumer._send_error(error_from_event(event))
                return None
            await self.consumer._send_json(200, self.builder.completion(event), self._id_header())
            return event
        return None

    async def _streamed(self, events: AsyncGenerator[Event, None]) -> Event | None:
        timer = asyncio.create_task(self._commit_later(), name="completion-commit-timer")
        try:
            async for event in events:
                async with self.lock:
                    if event["channel"] == "error" and not self.committed:
                        self.ended = True
                        await self.consumer._send_error(error_from_event(event))
                        return None
                    chunk = self.builder.take(event)
                    if event["channel"] in TERMINAL_CHANNELS:
                        return await self._finish(event)
                    if chunk is not None:
                        await self._commit([data_frame(chunk)])
            return None
        finally:
            timer.cancel()

    async def _commit_later(self) -> None:
        await asyncio.sleep(self.consumer.status_hold_seconds)
        async with self.lock:
            if not self.ended:
                await self._commit([])

    async def _commit(self, frames: list[bytes]) -> None:
        """Send the 200 (once), the role chunk with it, then `frames` (the lock is held by the caller)."""
        if not self.committed:
            self.committed = True
            headers = [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),  # nginx would otherwise buffer the whole answer
                *self._id_header(),
            ]
            await self.consumer.send_headers(status=200, headers=headers)
            frames = [data_frame(self.builder.role_chunk()), *frames]
        if frames:
            await self.consumer.send_body(b"".join(frames), more_body=True)

    async def _finish(self, event: Event) -> Event | None:
        """The terminal event (the lock is held by the caller)."""
        await self._commit([])
        self.ended = True
        if event["channel"] == "error":
            await self.consumer.send_body(data_frame(error_from_event(event).body()) + DONE, more_body=False)
            return None
        frames = []
        if (annotations := self.builder.annotations_chunk(event)) is not None:
            frames.append(data_frame(annotations))
        frames.append(data_frame(self.builder.final_chunk(event)))
        if self.request.include_usage:
            frames.append(data_frame(self.builder.usage_chunk(event)))
        await self.consumer.send_body(b"".join(frames) + DONE, more_body=False)
        return event

    def _id_header(self) -> list[Header]:
        return [(b"x-request-id", self.stream.request_id.encode("ascii"))]
