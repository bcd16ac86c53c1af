"""POST /v1/chat/completions in vLLM's shapes (``delta.reasoning_content`` for reasoning tokens)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from devtools.simulator.asgi_io import dumps
from devtools.simulator.bodies import BadRequest, chat_schema, flag, optional_int, single_choice
from devtools.simulator.engine import Generation, TokenKind, plan_generation
from devtools.simulator.serving import RequestContext, Responder, serve_generation
from devtools.simulator.text import Prompt


class ChatResponder(Responder):
    def __init__(self, ctx: RequestContext, generation: Generation, model: str, *, include_usage: bool) -> None:
        super().__init__(ctx, generation, model)
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.include_usage = include_usage
        self._role_sent = False
        # Every chunk shares this prefix; building it once keeps a token's cost to one small dumps().
        self._head = (
            f'data: {{"id":"{self.id}","object":"chat.completion.chunk","created":{self.created},'
            f'"model":{dumps(model)},"choices":'
        )

    def _chunk(self, delta_json: str, finish_reason: str | None = None) -> bytes:
        finish = "null" if finish_reason is None else f'"{finish_reason}"'
        choice = f'{{"index":0,"delta":{delta_json},"logprobs":null,"finish_reason":{finish}}}'
        return f"{self._head}[{choice}]}}\n\n".encode()

    async def _send_role(self) -> None:
        # vLLM opens every stream with a role-only delta once the first output exists.
        if not self._role_sent:
            self._role_sent = True
            await self.write(self._chunk('{"role":"assistant","content":""}'))

    async def emit(self, kind: TokenKind, token: str) -> None:
        await self._send_role()
        field = "reasoning_content" if kind == "reasoning" else "content"
        await self.write(self._chunk(f'{{"{field}":{dumps(token)}}}'))

    async def close_stream(self) -> None:
        await self._send_role()
        await self.write(self._chunk("{}", self.generation.finish_reason))
        if self.include_usage:
            await self.write(f'{self._head}[],"usage":{dumps(self.usage())}}}\n\n'.encode())
        await self.write(b"data: [DONE]\n\n", more=False)

    def usage(self) -> dict[str, Any]:
        generation = self.generation
        return {
            "prompt_tokens": generation.prompt_tokens,
            "completion_tokens": generation.completion_tokens,
            "total_tokens": generation.prompt_tokens + generation.completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": len(generation.reasoning)},
        }

    def document(self) -> dict[str, Any]:
        generation = self.generation
        message: dict[str, Any] = {
            "role": "assistant",
            "content": generation.content_text,
            "reasoning_content": generation.reasoning_text or None,
            "tool_calls": [],
        }
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": generation.finish_reason}],
            "usage": self.usage(),
        }


async def handle_chat(ctx: RequestContext, body: dict[str, Any]) -> None:
    try:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list.")
        single_choice(body)
        stream = flag(body, "stream")
        stream_options = body.get("stream_options")
        include_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
        include_usage = include_usage and "stream_usage" not in ctx.engine.faults.config.refuse
        max_tokens = optional_int(body, "max_completion_tokens", "max_tokens")
        schema = chat_schema(body)
    except BadRequest as exc:
        await ctx.send_error(400, exc.message)
        return
    template_kwargs = body.get("chat_template_kwargs")
    # Qwen-style switch that vLLM passes to the chat template: reasoning models answer directly.
    thinking = not (isinstance(template_kwargs, dict) and template_kwargs.get("enable_thinking") is False)
    config = ctx.engine.config
    prompt = Prompt.from_messages(messages)
    generation = plan_generation(config, prompt, max_tokens=max_tokens, schema=schema, reasoning=thinking)
    model = str(body.get("model") or config.model)
    responder = ChatResponder(ctx, generation, model, include_usage=include_usage)
    await serve_generation(ctx, responder, stream=stream)
