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

from openai import APIResponseValidationError, APIStatusError, AsyncOpenAI
from pydantic import BaseModel

from rag.errors import UpstreamError, UpstreamTimeout
from rag.llm.capabilities import ParameterRefused, ServerProfile, StructuredMode, refused_parameter
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
from rag.llm.tokens import TEMPLATE_TOKENS_PER_MESSAGE, estimate_tokens, prompt_text
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


# Where each API takes structured output: the parameter a refusal names.
_OUTPUT_PARAMETER: dict[str, str] = {"chat": "response_format", "responses": "text.format"}
_SCHEMA_INSTRUCTION = "Reply with one JSON object and nothing else, matching this JSON schema:\n"


def _ask_for_output(
    backend: ChatBackend, body: dict[str, Any], mode: StructuredMode, name: str, schema: dict[str, Any]
) -> None:
    """Request structured output with ``schema`` the way the server takes it (rag.llm.capabilities): strict
    ``json_schema``; else ``json_object`` (with the schema where the API has room for it, as llama.cpp's server
    reads it) and the schema in the instructions; else the instructions alone."""
    if mode == "json_schema":
        if backend == "chat":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": True},
            }
        else:
            body["text"] = {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": True}}
        return
    _add_instruction(backend, body, _SCHEMA_INSTRUCTION + json.dumps(schema, ensure_ascii=False))
    if mode == "json_object":
        if backend == "chat":
            body["response_format"] = {"type": "json_object", "schema": schema}
        else:
            body["text"] = {"format": {"type": "json_object"}}


def _add_instruction(backend: ChatBackend, body: dict[str, Any], text: str) -> None:
    if backend == "responses":
        body["instructions"] = f"{body['instructions']}\n\n{text}" if body.get("instructions") else text
        return
    messages = list(body["messages"])
    first = messages[0] if messages else {}
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        messages[0] = {**first, "content": f"{first['content']}\n\n{text}"}
    else:
        messages.insert(0, {"role": "system", "content": text})
    body["messages"] = messages


def _sent_messages(backend: ChatBackend, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The prompt of a request body as chat messages (what token counts are made of)."""
    if backend == "chat":
        return list(body.get("messages") or ())
    head = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    return [*head, *(body.get("input") or ())]


def _prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """An estimate of a prompt's tokens: what the first-token deadline and the prefill speed are reckoned in."""
    text, count = prompt_text(messages)
    return estimate_tokens(text) + TEMPLATE_TOKENS_PER_MESSAGE * count


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


class _StreamCall:
    """One streamed call's requests and what it teaches the backend's ServerProfile: ``stream_options`` refused
    (sent again without), no Responses API, whether usage came, where reasoning came, the prefill speed."""

    def __init__(self, backend: LLMBackend, api: ChatBackend, body: dict[str, Any]) -> None:
        self._backend = backend
        self._api = api
        self._body = body
        self._path = "/chat/completions" if api == "chat" else "/responses"
        self._client = backend._client()
        self.prompt_tokens = _prompt_tokens(_sent_messages(api, body))
        self._parser: ChatStreamParser | ResponsesStreamParser | None = None
        self._sent_at: float | None = None
        self._first_at: float | None = None
        self._options_sent = False
        self._text: list[str] = []
        self._finished = False

    def new_parser(self) -> ChatStreamParser | ResponsesStreamParser:
        self._parser = ChatStreamParser() if self._api == "chat" else ResponsesStreamParser()
        return self._parser

    async def open_stream(self) -> Any:  # a RawEventStream, which the policy reads as the SDK's AsyncStream
        profile = self._backend.profile
        loop = asyncio.get_running_loop()
        while True:
            body = dict(self._body)
            self._options_sent = self._api == "chat" and profile.stream_options is not False
            if self._options_sent:
                body["stream_options"] = {"include_usage": True}
            self._sent_at, self._first_at = loop.time(), None
            try:
                return await RawEventStream.open(self._client, self._path, body)
            except APIStatusError as exc:
                self._backend._refusal(self._api, exc, None)
                if not (self._options_sent and refused_parameter(exc, ("stream_options",))):
                    raise
                profile.stream_options_refused(self._api, exc)

    def seen(self, delta: LLMDelta) -> None:
        if delta.kind in ("answer", "reasoning") and delta.text:
            if self._first_at is None:
                self._first_at = asyncio.get_running_loop().time()
            self._text.append(delta.text)
        elif delta.kind == "usage":
            self._finished = True

    async def counted_usage(self, model: str) -> Usage:
        self._finished = True
        counter = self._backend.profile.tokens
        return await counter.usage(self._client, model, _sent_messages(self._api, self._body), "".join(self._text))

    def timed_out(self) -> None:
        """The call timed out: if before its first token, the server needs at least that long for this prompt."""
        if self._sent_at is not None and self._first_at is None:
            elapsed = asyncio.get_running_loop().time() - self._sent_at
            self._backend.profile.prefill.at_least(self.prompt_tokens, elapsed)

    def learn(self) -> None:
        """After the call: what it showed of the server (only a call that finished shows how long prefill takes)."""
        parser = self._parser
        if parser is None or not parser.finished:
            return
        profile = self._backend.profile
        profile.stream_done(
            self._api,
            usage=parser.usage is not None,
            options_sent=self._options_sent,
            reasoning_field=parser.reasoning_field,
        )
        if self._finished and self._sent_at is not None and self._first_at is not None:
            profile.prefill.observe(self.prompt_tokens, self._first_at - self._sent_at)


class LLMBackend:
    """What nodes call. Build one per process: ``LLMBackend(llm_config, policy_config)``."""

    def __init__(
        self, config: LLMConfig, policy_config: CallPolicyConfig | None = None, *, policy: CallPolicy | None = None
    ) -> None:
        self.config = config
        self.policy = policy or CallPolicy(policy_config or CallPolicyConfig())
        # What the server accepts, learned on its first refusals (rag.llm.capabilities).
        self.profile = ServerProfile(config.base_url)

    def _refusal(self, backend: ChatBackend, exc: APIStatusError, mode: StructuredMode | None) -> bool:
        """Learn from a refused request: True when it is worth sending again at once, stepped down. Raises
        ParameterRefused for what cannot be stepped down (no Responses API, structured output in no form)."""
        if backend == "responses" and exc.status_code in (404, 405):
            self.profile.responses_missing(exc.status_code)
            raise ParameterRefused(
                f"The LLM server has no Responses API (POST /responses: HTTP {exc.status_code}).",
                parameter="/responses",
                status=exc.status_code,
            ) from exc
        if mode is None or mode == "prompt" or refused_parameter(exc, (_OUTPUT_PARAMETER[backend],)) is None:
            return False
        if self.profile.structured_refused(backend, mode, exc):
            return True
        raise ParameterRefused(
            f"The LLM server refuses structured output ({exc.message}).",
            parameter=_OUTPUT_PARAMETER[backend],
            status=exc.status_code,
        ) from exc

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
        if backend == "chat":
            kwargs = {
                "model": model,
                "messages": _chat_messages(messages, instructions, input),
                "stream": True,
                **self._sampling(node, temperature, max_tokens, "max_tokens"),
            }
        elif backend == "responses":
            kwargs = {
                "model": model,
                "stream": True,
                **_responses_args(messages, instructions, input),
                **self._sampling(node, temperature, max_tokens, "max_output_tokens"),
            }
        else:
            raise ValueError(f"unknown LLM backend {backend!r} (expected 'chat' or 'responses')")
        call = _StreamCall(self, backend, {**kwargs, **(extra_body or {})})
        timeouts = StreamTimeouts(
            self.profile.prefill.first_token_timeout(cfg.first_token_timeout, call.prompt_tokens),
            cfg.between_tokens_timeout,
            total_timeout or cfg.total_timeout,
        )
        label = CallLabel(backend, node, model, "stream")
        report = functools.partial(report_generation, node=node, model=model, started=time.time(), operation="stream")
        reported = False
        try:
            async with contextlib.aclosing(
                self.policy.stream(label, call.open_stream, call.new_parser, timeouts, slot)
            ) as deltas:
                async for delta in deltas:
                    call.seen(delta)
                    if delta.usage is not None:
                        report(usage=delta.usage)
                        reported = True
                    yield delta
            if not reported:  # the server sent no usage: counted or estimated, and flagged so
                usage = await call.counted_usage(model)
                report(usage=usage)
                reported = True
                yield LLMDelta("usage", usage=usage)
        except (Exception, asyncio.CancelledError) as exc:
            if not reported:  # failed or cancelled before the end: a generation all the same, with why
                report(usage=None, error=generation_error(exc))
            if isinstance(exc, UpstreamTimeout):
                call.timed_out()
            raise
        finally:
            call.learn()

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
        if extra_body:
            body.update(extra_body)
        name = _schema_name(schema_name or f"{node}_output")
        schema = output_schema(output) if output is not None else None

        prompt_tokens = _prompt_tokens(_sent_messages(backend, body))
        sent_at: list[float] = []

        async def attempt() -> tuple[str, Usage]:
            sent_at[:] = [asyncio.get_running_loop().time()]
            while True:  # sent again at once, stepped down, when the server refuses how the output was asked for
                mode = self.profile.structured_mode(backend) if schema is not None else None
                sent = dict(body)
                if mode is not None and schema is not None:
                    _ask_for_output(backend, sent, mode, name, schema)
                try:
                    reply = await _post_json(client, path, sent)
                except APIStatusError as exc:
                    if self._refusal(backend, exc, mode):
                        continue
                    raise
                self.profile.answered(backend)
                text, usage = _read_reply(backend, reply)
                # the whole call bounds the time the server took to read the prompt (from above)
                self.profile.prefill.observe(prompt_tokens, asyncio.get_running_loop().time() - sent_at[0])
                if not usage.total_tokens:  # the server sent no usage: counted or estimated, and flagged so
                    usage = await self.profile.tokens.usage(client, model, _sent_messages(backend, sent), text)
                return text, usage

        # The time the server is expected to take to read the prompt (learned from streamed calls) is added to the
        # call's own: on a slow server a long prompt is not cut before its reply could start.
        deadline = (total_timeout or cfg.total_timeout) + self.profile.prefill.expected(prompt_tokens)
        label = CallLabel(backend, node, model, "complete")
        report = functools.partial(report_generation, node=node, model=model, started=time.time(), operation="complete")
        try:
            text, usage = await self.policy.call(label, attempt, total_timeout=deadline, slot=slot)
        except (Exception, asyncio.CancelledError) as exc:
            report(usage=None, error=generation_error(exc))
            if isinstance(exc, UpstreamTimeout) and sent_at:
                self.profile.prefill.at_least(prompt_tokens, asyncio.get_running_loop().time() - sent_at[0])
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
