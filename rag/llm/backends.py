"""The LLM backend pipeline nodes call: streamed answers, JSON-schema completions and embeddings.

Every call goes through rag.llm.policy (RPM window, concurrency slot, retries, timeouts) against an
OpenAI-compatible server (vLLM, OpenAI, DashScope...). Nodes get one ``LLMBackend`` per process through
``PipelineDeps.llm``; it is cheap to share and safe to use from many tasks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, Literal

from openai import APIResponseValidationError, AsyncOpenAI
from pydantic import BaseModel

from rag.errors import UpstreamError
from rag.llm.client import ClientKey, get_client
from rag.llm.config import CallPolicyConfig, LLMConfig
from rag.llm.errors import InvalidLLMOutput
from rag.llm.policy import DEFAULT_SLOT, CallLabel, CallPolicy, SlotTerms, StreamTimeouts
from rag.llm.streams import (
    ChatStreamParser,
    RawEventStream,
    ResponsesStreamParser,
    chat_usage,
    raw_post,
    responses_usage,
)
from rag.llm.structured import output_schema, parse_output
from rag.llm.types import LLMDelta, LLMResult
from rag.state import Usage
from rag.telemetry.record import generation_error, report_generation

__all__ = ["ChatBackend", "LLMBackend", "Message"]

ChatBackend = Literal["chat", "responses"]
Message = Mapping[str, Any]

_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")
# Roles that become Responses API `instructions` rather than input items.
_INSTRUCTION_ROLES = frozenset({"system", "developer"})
_MAX_TOKENS_FIELD: dict[str, str] = {"chat": "max_tokens", "responses": "max_output_tokens"}


def _schema_name(name: str) -> str:
    # OpenAI requires ^[a-zA-Z0-9_-]{1,64}$ for a json_schema name.
    return (_SCHEMA_NAME.sub("_", name) or "output")[:64]


def _chat_messages(
    messages: Sequence[Message] | None, instructions: str | None, input: str | Sequence[Message] | None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    if messages:
        out.extend(dict(m) for m in messages)
    if isinstance(input, str):
        out.append({"role": "user", "content": input})
    elif input:
        out.extend(dict(m) for m in input)
    if not out:
        raise ValueError("an LLM call needs messages, or instructions and input")
    return out


def _responses_args(
    messages: Sequence[Message] | None, instructions: str | None, input: str | Sequence[Message] | None
) -> dict[str, Any]:
    """``instructions`` + ``input`` for the Responses API; system messages are folded into the instructions."""
    parts = [instructions] if instructions else []
    items: list[dict[str, Any]] = []
    for message in messages or ():
        if message.get("role") in _INSTRUCTION_ROLES and isinstance(message.get("content"), str):
            parts.append(message["content"])
        else:
            items.append(dict(message))
    if isinstance(input, str):
        items.append({"role": "user", "content": input})
    elif input:
        items.extend(dict(m) for m in input)
    if not items:
        raise ValueError("a Responses call needs at least one input message")
    args: dict[str, Any] = {"input": items}
    if parts:
        args["instructions"] = "\n\n".join(parts)
    return args


def _ask_for_schema(backend: ChatBackend, body: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    """Request strict structured output with ``schema``, where each API takes it."""
    if backend == "chat":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": True},
        }
    else:
        body["text"] = {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": True}}


async def _post_json(client: AsyncOpenAI, path: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as it is (`raw_post`, as RawEventStream does for streams) and decode the reply's JSON."""
    response = await raw_post(client, path, body)
    try:
        return json.loads(response.content)
    except ValueError:
        raise APIResponseValidationError(response, response.text, message="the reply is not JSON") from None


def _read_reply(backend: ChatBackend, reply: Any) -> tuple[str, Usage]:
    """The answer text and usage of a decoded reply (``choices[0].message.content`` / the Responses output text)."""
    if not isinstance(reply, dict):
        return "", Usage()
    usage = reply.get("usage")
    if backend == "chat":
        choices = reply.get("choices")
        message = choices[0].get("message") if isinstance(choices, list) and choices else None
        content = message.get("content") if isinstance(message, dict) else None
        text = content if isinstance(content, str) else ""
        return text, chat_usage(usage) if isinstance(usage, dict) else Usage()
    return _output_text(reply), responses_usage(usage) if isinstance(usage, dict) else Usage()


def _output_text(response: dict[str, Any]) -> str:
    """The SDK's ``Response.output_text``: every ``output_text`` part of every ``message`` output item, joined."""
    texts: list[str] = []
    for item in response.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "".join(texts)


def _completed(text: str, usage: Usage, output: type[BaseModel] | None, report: Callable[..., None]) -> LLMResult:
    """The result of an answered call, its output parsed into ``output``; reports the generation."""
    parsed = None
    if output is not None:
        try:
            parsed = parse_output(text, output)
        except InvalidLLMOutput as exc:
            exc.usage = usage
            # Answered and paid for, but unusable: the generation keeps its usage and says why.
            report(usage=usage, error=generation_error(exc))
            raise
    report(usage=usage)
    return LLMResult(text=text, usage=usage, parsed=parsed)


class LLMBackend:
    """What nodes call. Build one per process: ``LLMBackend(llm_config, policy_config)``."""

    def __init__(
        self, config: LLMConfig, policy_config: CallPolicyConfig | None = None, *, policy: CallPolicy | None = None
    ) -> None:
        self.config = config
        self.policy = policy or CallPolicy(policy_config or CallPolicyConfig())

    # ------------------------------------------------------------------ clients

    def _client(self) -> AsyncOpenAI:
        cfg = self.config
        if not cfg.base_url:
            raise RuntimeError("no LLM server configured (LLMConfig.base_url is empty): use the offline backend")
        return get_client(ClientKey(cfg.base_url, cfg.api_key, cfg.connect_timeout, cfg.total_timeout, cfg.http_client))

    def _embedding_client(self) -> AsyncOpenAI:
        cfg = self.config
        return get_client(
            ClientKey(cfg.embeddings_url, cfg.embeddings_key, cfg.connect_timeout, cfg.total_timeout, cfg.http_client)
        )

    def _sampling(self, node: str, temperature: float | None, max_tokens: int | None, field: str) -> dict[str, Any]:
        args: dict[str, Any] = {}
        temperature = temperature if temperature is not None else self.config.temperature_for(node)
        if temperature is not None:
            args["temperature"] = temperature
        if max_tokens is not None:
            args[field] = max_tokens
        return args

    # ------------------------------------------------------------------ streamed answers

    async def stream_answer(
        self,
        *,
        backend: ChatBackend,
        node: str,
        messages: Sequence[Message] | None = None,
        instructions: str | None = None,
        input: str | Sequence[Message] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        total_timeout: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        slot: SlotTerms = DEFAULT_SLOT,
    ) -> AsyncGenerator[LLMDelta, None]:
        """Stream an answer: ``answer`` and ``reasoning`` deltas as they come, then one ``usage`` delta.

        Give ``messages`` (chat-style, either backend) or ``instructions`` + ``input``; ``total_timeout`` counts
        from when the call holds its slot, whose wait ``slot`` bounds. Raises rag.errors Busy (SlotUnavailable when
        it never started) / UpstreamTimeout / UpstreamError. Iterate it inside ``contextlib.aclosing(...)`` so that
        leaving the loop early (or being cancelled) closes the upstream stream and frees the slot at once.
        """
        cfg = self.config
        model = model or cfg.model_for(backend, node)
        client = self._client()
        extra = dict(extra_body) if extra_body else None
        if backend == "chat":
            kwargs = {
                "model": model,
                "messages": _chat_messages(messages, instructions, input),
                "stream": True,
                "stream_options": {"include_usage": True},
                **self._sampling(node, temperature, max_tokens, "max_tokens"),
            }

            async def open_stream() -> Any:
                return await RawEventStream.open(client, "/chat/completions", {**kwargs, **(extra or {})})

            new_parser: Any = ChatStreamParser
        elif backend == "responses":
            kwargs = {
                "model": model,
                "stream": True,
                **_responses_args(messages, instructions, input),
                **self._sampling(node, temperature, max_tokens, "max_output_tokens"),
            }

            async def open_stream() -> Any:
                return await RawEventStream.open(client, "/responses", {**kwargs, **(extra or {})})

            new_parser = ResponsesStreamParser
        else:
            raise ValueError(f"unknown LLM backend {backend!r} (expected 'chat' or 'responses')")
        timeouts = StreamTimeouts(
            cfg.first_token_timeout, cfg.between_tokens_timeout, total_timeout or cfg.total_timeout
        )
        label = CallLabel(backend, node, model, "stream")
        started = time.time()
        report = functools.partial(report_generation, node=node, model=model, started=started, operation="stream")
        reported = False
        try:
            async with contextlib.aclosing(
                self.policy.stream(label, open_stream, new_parser, timeouts, slot)
            ) as deltas:
                async for delta in deltas:
                    if delta.usage is not None:
                        report(usage=delta.usage)
                        reported = True
                    yield delta
        except (Exception, asyncio.CancelledError) as exc:
            if not reported:  # failed or cancelled before the end: a generation all the same, with why
                report(usage=None, error=generation_error(exc))
            raise

    async def stream_text(self, **kwargs: Any) -> tuple[str, str, Usage]:
        """Convenience for tests and non-streaming callers: (answer, reasoning, usage) of ``stream_answer``."""
        answer: list[str] = []
        reasoning: list[str] = []
        usage = Usage()
        async with contextlib.aclosing(self.stream_answer(**kwargs)) as deltas:
            async for delta in deltas:
                if delta.kind == "answer":
                    answer.append(delta.text)
                elif delta.kind == "reasoning":
                    reasoning.append(delta.text)
                elif delta.usage is not None:
                    usage.add(delta.usage)
        return "".join(answer), "".join(reasoning), usage

    # ------------------------------------------------------------------ one-shot completions

    async def complete(
        self,
        *,
        backend: ChatBackend,
        node: str,
        messages: Sequence[Message] | None = None,
        instructions: str | None = None,
        input: str | Sequence[Message] | None = None,
        output: type[BaseModel] | None = None,
        schema_name: str | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        total_timeout: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        slot: SlotTerms = DEFAULT_SLOT,
    ) -> LLMResult:
        """A non-streamed completion. With ``output`` (a pydantic model), structured output is requested (strict,
        with the model's JSON schema) and the answer is parsed into it: ``parsed`` holds it, and a reply that does
        not fit raises
        rag.llm.errors.InvalidLLMOutput (callers fall back to their rules). Transport failures raise
        rag.errors Busy / UpstreamTimeout / UpstreamError like ``stream_answer``; ``total_timeout`` and ``slot`` as
        there.
        """
        cfg = self.config
        model = model or cfg.model_for(backend, node)
        client = self._client()
        body: dict[str, Any] = {"model": model}
        if backend == "chat":
            path = "/chat/completions"
            body["messages"] = _chat_messages(messages, instructions, input)
        elif backend == "responses":
            path = "/responses"
            body.update(_responses_args(messages, instructions, input))
        else:
            raise ValueError(f"unknown LLM backend {backend!r} (expected 'chat' or 'responses')")
        body.update(self._sampling(node, temperature, max_tokens, _MAX_TOKENS_FIELD[backend]))
        if output is not None:
            _ask_for_schema(backend, body, _schema_name(schema_name or f"{node}_output"), output_schema(output))
        if extra_body:
            body.update(extra_body)

        async def attempt() -> tuple[str, Usage]:
            return _read_reply(backend, await _post_json(client, path, body))

        label = CallLabel(backend, node, model, "complete")
        report = functools.partial(report_generation, node=node, model=model, started=time.time(), operation="complete")
        try:
            text, usage = await self.policy.call(
                label, attempt, total_timeout=total_timeout or cfg.total_timeout, slot=slot
            )
        except (Exception, asyncio.CancelledError) as exc:
            report(usage=None, error=generation_error(exc))
            raise
        return _completed(text, usage, output, functools.partial(report, ended=time.time()))

    # ------------------------------------------------------------------ embeddings

    async def embed(self, texts: Sequence[str], *, node: str = "embedding", input_type: str = "") -> list[list[float]]:
        """Dense vectors for ``texts`` (in order) from ``/v1/embeddings``, in batches under the ``embedding`` slot.
        ``input_type``: sent as the request's field of that name when not empty (servers that prefix for the
        model themselves: query or passage, rag.retrieval.prompts)."""
        cfg = self.config
        extra = {"input_type": input_type} if input_type else None
        client = self._embedding_client()
        label = CallLabel("embedding", node, cfg.embedding_model, "embed")
        vectors: list[list[float]] = []
        for start in range(0, len(texts), cfg.embedding_batch_size):
            batch = list(texts[start : start + cfg.embedding_batch_size])

            async def attempt(batch: list[str] = batch) -> Any:
                # float, not the SDK's default base64: not every OpenAI-compatible server implements base64.
                return await client.embeddings.create(
                    model=cfg.embedding_model, input=batch, encoding_format="float", extra_body=extra
                )

            response = await self.policy.call(label, attempt, total_timeout=cfg.total_timeout)
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(batch):
                raise UpstreamError(f"The embedding server returned {len(data)} vectors for {len(batch)} texts.")
            for item in data:
                if len(item.embedding) != cfg.embedding_dim:
                    # A configuration mistake (EMBEDDING_DIM vs the served model); vectors of another size
                    # would corrupt the index, so stop here with a message that says what to fix.
                    raise UpstreamError(
                        f"The embedding model returned {len(item.embedding)} dimensions, "
                        f"expected {cfg.embedding_dim} (EMBEDDING_DIM)."
                    )
                vectors.append(list(item.embedding))
        return vectors
