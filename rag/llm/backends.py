"""The LLM backend pipeline nodes call: streamed answers, JSON-schema completions and embeddings.

Every call goes through rag.llm.policy (RPM window, concurrency slot, retries, timeouts) against an
OpenAI-compatible server (vLLM, OpenAI, DashScope...). Nodes get one ``LLMBackend`` per process through
``PipelineDeps.llm``; it is cheap to share and safe to use from many tasks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal

from openai import AsyncOpenAI
from pydantic import BaseModel

from rag.errors import UpstreamError
from rag.llm.client import ClientKey, get_client
from rag.llm.config import CallPolicyConfig, LLMConfig
from rag.llm.errors import InvalidLLMOutput
from rag.llm.policy import DEFAULT_SLOT, CallLabel, CallPolicy, SlotTerms, StreamTimeouts
from rag.llm.streams import ChatStreamParser, RawEventStream, ResponsesStreamParser, chat_usage, responses_usage
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
        return get_client(ClientKey(cfg.base_url, cfg.api_key, cfg.connect_timeout, cfg.total_timeout))

    def _embedding_client(self) -> AsyncOpenAI:
        cfg = self.config
        return get_client(ClientKey(cfg.embeddings_url, cfg.embeddings_key, cfg.connect_timeout, cfg.total_timeout))

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
        name = _schema_name(schema_name or f"{node}_output")
        json_schema = output_schema(output) if output is not None else None
        extra = dict(extra_body) if extra_body else None
        if backend == "chat":
            kwargs: dict[str, Any] = {
                "model": model,
                "messages": _chat_messages(messages, instructions, input),
                **self._sampling(node, temperature, max_tokens, "max_tokens"),
            }
            if json_schema is not None:
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": json_schema, "strict": True},
                }

            async def attempt() -> tuple[str, Usage]:
                completion = await client.chat.completions.create(**kwargs, extra_body=extra)
                text = (completion.choices[0].message.content or "") if completion.choices else ""
                return text, chat_usage(completion.usage) if completion.usage else Usage()

        elif backend == "responses":
            kwargs = {
                "model": model,
                **_responses_args(messages, instructions, input),
                **self._sampling(node, temperature, max_tokens, "max_output_tokens"),
            }
            if json_schema is not None:
                kwargs["text"] = {
                    "format": {"type": "json_schema", "name": name, "schema": json_schema, "strict": True}
                }

            async def attempt() -> tuple[str, Usage]:
                response = await client.responses.create(**kwargs, extra_body=extra)
                return response.output_text, responses_usage(response.usage) if response.usage else Usage()

        else:
            raise ValueError(f"unknown LLM backend {backend!r} (expected 'chat' or 'responses')")
        label = CallLabel(backend, node, model, "complete")
        started = time.time()
        report = functools.partial(report_generation, node=node, model=model, started=started, operation="complete")
        try:
            text, usage = await self.policy.call(
                label, attempt, total_timeout=total_timeout or cfg.total_timeout, slot=slot
            )
        except (Exception, asyncio.CancelledError) as exc:
            report(usage=None, error=generation_error(exc))
            raise
        ended = time.time()
        parsed = None
        if output is not None:
            try:
                parsed = parse_output(text, output)
            except InvalidLLMOutput as exc:
                exc.usage = usage
                # Answered and paid for, but unusable: the generation keeps its usage and says why.
                report(usage=usage, ended=ended, error=generation_error(exc))
                raise
        report(usage=usage, ended=ended)
        return LLMResult(text=text, usage=usage, parsed=parsed)

    # ------------------------------------------------------------------ embeddings

    async def embed(self, texts: Sequence[str], *, node: str = "embedding") -> list[list[float]]:
        """Dense vectors for ``texts`` (in order) from ``/v1/embeddings``, in batches under the ``embedding`` slot."""
        cfg = self.config
        client = self._embedding_client()
        label = CallLabel("embedding", node, cfg.embedding_model, "embed")
        vectors: list[list[float]] = []
        for start in range(0, len(texts), cfg.embedding_batch_size):
            batch = list(texts[start : start + cfg.embedding_batch_size])

            async def attempt(batch: list[str] = batch) -> Any:
                # float, not the SDK's default base64: not every OpenAI-compatible server implements base64.
                return await client.embeddings.create(model=cfg.embedding_model, input=batch, encoding_format="float")

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
