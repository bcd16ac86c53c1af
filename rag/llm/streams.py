"""Parsers that turn the SDK's streamed chunks into LLMDelta, one per API (a fresh parser per attempt)."""

from __future__ import annotations

from typing import Any

from openai import OpenAIError

from rag.llm.types import LLMDelta
from rag.state import Usage

__all__ = ["ChatStreamParser", "ResponsesStreamParser", "StreamEventError", "chat_usage", "responses_usage"]

# Where OpenAI-compatible servers put chat reasoning text: vLLM's reasoning parsers used `reasoning_content`
# (DeepSeek's name) and newer releases `reasoning`. The SDK keeps unknown fields as pydantic extras.
_CHAT_REASONING_FIELDS = ("reasoning_content", "reasoning")
_RESPONSES_REASONING_EVENTS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})


class StreamEventError(OpenAIError):
    """The server reported a failure inside the stream (an ``error`` / ``response.failed`` event).

    An OpenAIError so the policy treats it like the SDK's own errors: not retried (the server answered).
    """


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def chat_usage(usage: Any) -> Usage:
    """rag Usage from a Chat Completions ``CompletionUsage``."""
    prompt, completion = _int(getattr(usage, "prompt_tokens", 0)), _int(getattr(usage, "completion_tokens", 0))
    return Usage(prompt, completion, _int(getattr(usage, "total_tokens", 0)) or prompt + completion)


def responses_usage(usage: Any) -> Usage:
    """rag Usage from a Responses API ``ResponseUsage``."""
    prompt, completion = _int(getattr(usage, "input_tokens", 0)), _int(getattr(usage, "output_tokens", 0))
    return Usage(prompt, completion, _int(getattr(usage, "total_tokens", 0)) or prompt + completion)


def _text_field(obj: Any, name: str) -> str:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) else ""


class ChatStreamParser:
    """``chat.completion.chunk`` objects -> deltas. Only choice 0 is read (we always ask for one)."""

    def __init__(self) -> None:
        self.finished = False
        self.usage: Usage | None = None

    def feed(self, chunk: Any) -> list[LLMDelta]:
        out: list[LLMDelta] = []
        if getattr(chunk, "usage", None) is not None:
            # The last usage seen wins: with vLLM's continuous_usage_stats every chunk carries running totals.
            self.usage = chat_usage(chunk.usage)
        for choice in getattr(chunk, "choices", None) or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                # Some servers send both fields with the same text; take the first one present, not both.
                reasoning = next(filter(None, (_text_field(delta, f) for f in _CHAT_REASONING_FIELDS)), "")
                if reasoning:
                    out.append(LLMDelta("reasoning", reasoning))
                if delta.content:
                    out.append(LLMDelta("answer", delta.content))
            if choice.finish_reason is not None:
                self.finished = True
        return out


class ResponsesStreamParser:
    """Responses API stream events -> deltas; usage arrives with ``response.completed``."""

    def __init__(self) -> None:
        self.finished = False
        self.usage: Usage | None = None
        self.status = ""

    def feed(self, event: Any) -> list[LLMDelta]:
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta":
            text = _text_field(event, "delta")
            return [LLMDelta("answer", text)] if text else []
        if kind in _RESPONSES_REASONING_EVENTS:
            text = _text_field(event, "delta")
            return [LLMDelta("reasoning", text)] if text else []
        if kind in ("response.completed", "response.incomplete"):
            # "incomplete" (max_output_tokens) is a finished, if truncated, answer: keep what was streamed.
            response = getattr(event, "response", None)
            self.finished = True
            self.status = _text_field(response, "status") or kind.rsplit(".", 1)[-1]
            if getattr(response, "usage", None) is not None:
                self.usage = responses_usage(response.usage)  # type: ignore[union-attr]
            return []
        if kind == "response.failed":
            error = getattr(getattr(event, "response", None), "error", None)
            raise StreamEventError(f"response failed: {_text_field(error, 'code') or 'unknown error'}")
        if kind == "error":
            raise StreamEventError(f"stream error event: {_text_field(event, 'code') or 'unknown error'}")
        return []
