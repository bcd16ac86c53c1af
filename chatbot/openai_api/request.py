"""A `POST /v1/chat/completions` body turned into the chat exchange's input.

- `model` names a backend (`GET /v1/models` lists them); any other name is a 404 `model_not_found`.
- `messages`: the last one must be the user's question; the `user` and `assistant` turns before it are the
  conversation (the last `HISTORY_TURNS` pairs are kept, as for a stored conversation). `system` and `developer`
  messages are accepted and ignored: the assistant answers from the help centre with its own instructions, which
  a client must not be able to replace. Content is a string or a list of `text` parts; other parts (images,
  audio) and `tool` turns are refused.
- `stream`, `stream_options.include_usage` are honoured. `max_tokens`, `max_completion_tokens`, `temperature`,
  `top_p`, `presence_penalty`, `frequency_penalty` and `seed` are checked for their type and otherwise ignored,
  as are `stop`, `user` and fields this API does not know: the length and style of an answer are the
  deployment's (its prompts and LLM settings). `n` must be 1; `response_format` other than text is refused.
- `tools`, `tool_choice`, `parallel_tool_calls`, `functions` and `function_call` are checked for their type and
  ignored: the assistant answers from the help centre and never calls a tool (no `tool_calls` ever come back).
  Clients send their tools with every chat (Open WebUI its built-in ones), and refusing them refused every chat.
- A client's background task (a chat title, tags, follow-up suggestions, search queries, autocompletion, as Open
  WebUI, LibreChat and LobeChat send them: `chatbot.openai_api.tasks`) is recognised here and answered apart from
  the pipeline; its prompt may be longer than a question.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chatbot.openai_api.errors import ApiError, api_error
from chatbot.openai_api.tasks import ClientTask, client_task_detect
from chatbot.services import HISTORY_TURNS
from chatbot.streaming import AskInput
from infra.jsonio import JsonInputError, json_decode
from rag.questions import question_too_long
from rag.runtime import BACKENDS
from rag.values import Turn

_IGNORED_NUMBERS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_IGNORED_INTEGERS = ("max_tokens", "max_completion_tokens", "seed")
_ROLES = ("system", "developer", "user", "assistant")
# Accepted and ignored (type-checked): the assistant never calls tools.
_IGNORED_ARRAYS = ("tools", "functions")
_IGNORED_CHOICES = ("tool_choice", "function_call")  # "none" / "auto" / "required" or an object naming one
# A task's prompt carries the chat it is about (Open WebUI's follow-ups: the last 5 messages, answers included).
TASK_PROMPT_MAX_CHARS = 32_000


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str
    ask: AskInput
    stream: bool
    include_usage: bool
    # A client's background task (title, tags...), answered apart from the pipeline; None for a question.
    task: ClientTask | None = None


def _bad(message: str, param: str | None = None) -> ApiError:
    return api_error("bad_request", message, param=param)


def body_decode(body: bytes) -> dict[str, Any]:
    try:
        payload = json_decode(body)
    except JsonInputError as exc:
        # OpenAI's `param` names the top-level parameter; the message names the exact place.
        param = exc.field.split(".", 1)[0].split("[", 1)[0]
        message = exc.message if param == "body" else f"{exc.field} {exc.message}"
        raise _bad(message, None if param == "body" else param) from None
    if not isinstance(payload, dict):
        raise _bad("request body must be a JSON object")
    return payload


def completion_request_parse(payload: dict[str, Any], *, client_id: str) -> CompletionRequest:
    model = _model(payload.get("model"))
    _check_options(payload)
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad(f"'stream' must be true or false, not {json.dumps(stream)}", "stream")
    include_usage = _include_usage(payload.get("stream_options"), stream=bool(stream))
    messages = _messages(payload.get("messages"))
    task = client_task_detect(messages)
    question, history = _conversation(messages, max_chars=TASK_PROMPT_MAX_CHARS if task else None)
    ask = AskInput(
        question=question,
        backend=model,
        conversation_id="",
        client_id=client_id,
        history=history,
        client_rate_limited=False,
        # never degraded: an API client gets 429/503/504 and retries, as OpenAI clients do
        degraded_allowed=False,
    )
    return CompletionRequest(model=model, ask=ask, stream=bool(stream), include_usage=include_usage, task=task)


def _model(model: Any) -> str:
    if model is None:
        raise _bad("'model' is required: one of " + ", ".join(BACKENDS), "model")
    if not isinstance(model, str):
        raise _bad(f"'model' must be a string, not {type(model).__name__}", "model")
    if model not in BACKENDS:
        raise api_error(
            "model_not_found", f"the model {model!r} does not exist; use one of {', '.join(BACKENDS)}", param="model"
        )
    return model


def _check_options(payload: dict[str, Any]) -> None:
    for name in _IGNORED_NUMBERS:
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise _bad(f"'{name}' must be a number, not {json.dumps(value)}", name)
    for name in _IGNORED_INTEGERS:
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _bad(f"'{name}' must be a non-negative integer, not {json.dumps(value)}", name)
    n = payload.get("n")
    if n is not None and n != 1:
        raise _bad(f"'n' must be 1: one answer per request, not {json.dumps(n)}", "n")
    for name in _IGNORED_ARRAYS:
        value = payload.get(name)
        if value is not None and not isinstance(value, list):
            raise _bad(f"'{name}' must be an array, not {json.dumps(value)[:80]}", name)
    for name in _IGNORED_CHOICES:
        value = payload.get(name)
        if value is not None and not isinstance(value, (str, dict)):
            raise _bad(f"'{name}' must be a string or an object, not {json.dumps(value)[:80]}", name)
    parallel = payload.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad(f"'parallel_tool_calls' must be true or false, not {json.dumps(parallel)}", "parallel_tool_calls")
    response_format = payload.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise _bad('\'response_format\' other than {"type": "text"} is not supported', "response_format")


def _include_usage(options: Any, *, stream: bool) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    if not stream:
        raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise _bad("'stream_options.include_usage' must be true or false", "stream_options")
    return include


def _messages(messages: Any) -> list[Turn]:
    """Every message as (role, text), checked; the last must be the user's."""
    if messages is None:
        raise _bad("'messages' is required", "messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array", "messages")
    checked = [Turn(*_message(message, index)) for index, message in enumerate(messages)]
    if checked[-1].role != "user":
        raise _bad("the last message must be the user's question (role 'user')", "messages")
    return checked


def _conversation(messages: list[Turn], *, max_chars: int | None) -> tuple[str, tuple[Turn, ...]]:
    turns = [turn for turn in messages if turn.role in ("user", "assistant")]
    question = turns[-1].content
    if not question.strip():
        raise _bad("the last user message is empty", "messages")
    if max_chars is not None:
        if len(question) > max_chars:
            raise _bad(
                f"the last user message is too long ({len(question)} characters, at most {max_chars})", "messages"
            )
    elif too_long := question_too_long(question, subject="the last user message"):
        raise _bad(too_long, "messages")
    history = tuple(turn for turn in turns[:-1] if turn.content.strip())
    return question, history[-HISTORY_TURNS * 2 :]


def _message(message: Any, index: int) -> tuple[str, str]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise _bad(f"{where} must be an object", "messages")
    role = message.get("role")
    if role not in _ROLES:
        shown = json.dumps(role)
        raise _bad(f"{where}.role must be one of {', '.join(_ROLES)}, not {shown}", "messages")
    content = message.get("content")
    if content is None and role == "assistant":
        return role, ""
    if isinstance(content, str):
        return role, content
    if isinstance(content, list):
        parts = []
        for number, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"{where}.content[{number}] must be a text part: only text is understood", "messages")
            parts.append(part["text"])
        return role, "\n".join(parts)
    raise _bad(f"{where}.content must be a string or an array of text parts", "messages")
