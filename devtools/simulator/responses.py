"""POST /v1/responses: the Responses API object and its streaming event sequence.

Stream: response.created, response.in_progress, [reasoning item: output_item.added, reasoning deltas,
done events, output_item.done], message item: output_item.added, content_part.added, output_text.delta...,
output_text.done, content_part.done, output_item.done, response.completed (with usage). Reasoning is
streamed as ``response.reasoning_text.*`` (vLLM) or, when the request asks for ``reasoning.summary``, as
``response.reasoning_summary_*`` events (OpenAI). No ``[DONE]`` line: the Responses API has none.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from devtools.simulator.asgi_io import dumps, sse_event
from devtools.simulator.bodies import BadRequest, flag, optional_int, responses_schema
from devtools.simulator.engine import Generation, TokenKind, plan_generation
from devtools.simulator.serving import RequestContext, Responder, serve_generation
from devtools.simulator.text import Prompt


class ResponsesResponder(Responder):
    def __init__(self, ctx: RequestContext, generation: Generation, model: str, body: dict[str, Any]) -> None:
        super().__init__(ctx, generation, model)
        self.body = body
        self.id = f"resp_{uuid.uuid4().hex}"
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.reasoning_id = f"rs_{uuid.uuid4().hex}"
        self.created_at = int(time.time())
        reasoning = body.get("reasoning")
        self.summary_mode = isinstance(reasoning, dict) and reasoning.get("summary") is not None
        self._sequence = 0
        self._reasoning_open = False
        self._reasoning_done = False
        self._message_open = False
        self._reasoning_text: list[str] = []
        self._content_text: list[str] = []

    # -- shapes ---------------------------------------------------------------------------------------

    @property
    def _message_index(self) -> int:
        return 1 if self.generation.reasoning else 0

    def _reasoning_item(self, *, done: bool) -> dict[str, Any]:
        text = "".join(self._reasoning_text)
        item: dict[str, Any] = {
            "id": self.reasoning_id,
            "type": "reasoning",
            "summary": [],
            "status": "completed" if done else "in_progress",
        }
        if self.summary_mode:
            item["summary"] = [{"type": "summary_text", "text": text}] if done else []
        else:
            item["content"] = [{"type": "reasoning_text", "text": text}] if done else []
        return item

    def _message_item(self, *, done: bool) -> dict[str, Any]:
        content = [self._text_part("".join(self._content_text))] if done else []
        status = "completed" if done else "in_progress"
        return {"id": self.message_id, "type": "message", "role": "assistant", "status": status, "content": content}

    @staticmethod
    def _text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _usage(self) -> dict[str, Any]:
        generation = self.generation
        return {
            "input_tokens": generation.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": generation.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": len(generation.reasoning)},
            "total_tokens": generation.prompt_tokens + generation.completion_tokens,
        }

    def _response(self, *, status: str, output: list[dict[str, Any]], usage: bool) -> dict[str, Any]:
        body = self.body
        truncated = status == "incomplete"
        text_config = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status in ("completed", "incomplete") else None,
            "model": self.model,
            "output": output,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
            "instructions": body.get("instructions") if isinstance(body.get("instructions"), str) else None,
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") if isinstance(body.get("reasoning"), dict) else None,
            "temperature": body.get("temperature", 1.0),
            "text": text_config,
            "tool_choice": "auto",
            "tools": [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": self._usage() if usage else None,
        }

    def _final_status(self) -> str:
        return "incomplete" if self.generation.finish_reason == "length" else "completed"

    # -- streaming --------------------------------------------------------------------------------------

    async def _event(self, kind: str, **fields: Any) -> None:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        await self.write(sse_event(dumps(payload), kind))

    async def open_stream(self) -> None:
        await super().open_stream()
        await self._event("response.created", response=self._response(status="in_progress", output=[], usage=False))
        await self._event("response.in_progress", response=self._response(status="in_progress", output=[], usage=False))

    async def emit(self, kind: TokenKind, token: str) -> None:
        if kind == "reasoning":
            if not self._reasoning_open:
                await self._open_reasoning()
            self._reasoning_text.append(token)
            if self.summary_mode:
                await self._event("response.reasoning_summary_text.delta", summary_index=0, delta=token, **self._rs())
            else:
                await self._event("response.reasoning_text.delta", content_index=0, delta=token, **self._rs())
            return
        if not self._message_open:
            await self._open_message()
        self._content_text.append(token)
        await self._event("response.output_text.delta", content_index=0, delta=token, logprobs=[], **self._msg())

    def _rs(self) -> dict[str, Any]:
        return {"item_id": self.reasoning_id, "output_index": 0}

    def _msg(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": self._message_index}

    async def _open_reasoning(self) -> None:
        self._reasoning_open = True
        await self._event("response.output_item.added", output_index=0, item=self._reasoning_item(done=False))
        if self.summary_mode:
            part = {"type": "summary_text", "text": ""}
            await self._event("response.reasoning_summary_part.added", summary_index=0, part=part, **self._rs())
        else:
            part = {"type": "reasoning_text", "text": ""}
            await self._event("response.content_part.added", content_index=0, part=part, **self._rs())

    async def _close_reasoning(self) -> None:
        if not self._reasoning_open or self._reasoning_done:
            return
        self._reasoning_done = True
        text = "".join(self._reasoning_text)
        if self.summary_mode:
            await self._event("response.reasoning_summary_text.done", summary_index=0, text=text, **self._rs())
            part = {"type": "summary_text", "text": text}
            await self._event("response.reasoning_summary_part.done", summary_index=0, part=part, **self._rs())
        else:
            await self._event("response.reasoning_text.done", content_index=0, text=text, **self._rs())
            part = {"type": "reasoning_text", "text": text}
            await self._event("response.content_part.done", content_index=0, part=part, **self._rs())
        await self._event("response.output_item.done", output_index=0, item=self._reasoning_item(done=True))

    async def _open_message(self) -> None:
        await self._close_reasoning()
        self._message_open = True
        index = self._message_index
        await self._event("response.output_item.added", output_index=index, item=self._message_item(done=False))
        await self._event("response.content_part.added", content_index=0, part=self._text_part(""), **self._msg())

    async def close_stream(self) -> None:
        if self.generation.reasoning and not self._reasoning_open:
            await self._open_reasoning()
        if not self._message_open:
            await self._open_message()
        text = "".join(self._content_text)
        await self._event("response.output_text.done", content_index=0, text=text, logprobs=[], **self._msg())
        await self._event("response.content_part.done", content_index=0, part=self._text_part(text), **self._msg())
        await self._event(
            "response.output_item.done", output_index=self._message_index, item=self._message_item(done=True)
        )
        # Always response.completed (vLLM does so even for a length cut; status says "incomplete").
        final = self._response(status=self._final_status(), output=self._output(), usage=True)
        await self._event("response.completed", response=final)
        await self.write(b"", more=False)

    def _output(self) -> list[dict[str, Any]]:
        output = [self._reasoning_item(done=True)] if self.generation.reasoning else []
        return [*output, self._message_item(done=True)]

    def document(self) -> dict[str, Any]:
        self._reasoning_text = list(self.generation.reasoning)
        self._content_text = list(self.generation.content)
        return self._response(status=self._final_status(), output=self._output(), usage=True)


async def handle_responses(ctx: RequestContext, body: dict[str, Any]) -> None:
    try:
        input_value = body.get("input")
        if not isinstance(input_value, (str, list)) or not input_value:
            raise BadRequest("input must be a non-empty string or list of input items.")
        stream = flag(body, "stream")
        max_tokens = optional_int(body, "max_output_tokens")
        schema = responses_schema(body)
    except BadRequest as exc:
        await ctx.send_error(400, exc.message)
        return
    config = ctx.engine.config
    prompt = Prompt.from_responses_input(input_value, body.get("instructions"))
    generation = plan_generation(config, prompt, max_tokens=max_tokens, schema=schema)
    model = str(body.get("model") or config.model)
    await serve_generation(ctx, ResponsesResponder(ctx, generation, model, body), stream=stream)
