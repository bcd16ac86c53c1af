"""What the LLM server accepts, found out rather than assumed, and remembered for the life of the process.

OpenAI-compatible servers differ in what they accept beyond the basics. The backend starts from the most capable
request and steps down on the first refusal, once per process (each step is logged once, as a WARNING):

- structured output: ``json_schema`` (strict), then ``json_object`` carrying the schema (llama.cpp's server takes
  ``{"type": "json_object", "schema": ...}``; llama-cpp-python refuses ``json_schema`` with HTTP 500 "Input should
  be 'text' or 'json_object'"), then the prompt alone (the schema written into the instructions); the reply is
  validated against the output model in every case (rag.llm.structured);
- ``stream_options`` (``include_usage``): dropped when refused; a stream that brings no usage is counted with the
  server's tokenizer or estimated (rag.llm.tokens), flagged ``estimated``;
- the Responses API: a 404 on ``/responses`` is remembered and named (`/api/v1/ready`, the console) instead of
  being retried;
- reasoning: which field the server streams reasoning in (``reasoning_content``, ``reasoning``, Responses events)
  is recorded when it first does.

A refusal is an HTTP 4xx/5xx (not 429, 503 or a gateway's 502/504, which say "overloaded") whose message names
the parameter. It is not an overload: the request is sent again at once, stepped down, within the same attempt and
slot, and a refusal with no step left (``ParameterRefused``) is never retried by the call policy.

The first-token deadline is learned here too (`PrefillSpeed`): from finished streamed calls, the seconds the
server takes per prompt token before its first token, so a long prompt on a slow (CPU) server gets the time it
needs, never less than the configured floor (LLM_FIRST_TOKEN_TIMEOUT).

What the process learned is in the concurrency console and `/api/v1/admin/concurrency/status` (the worker's
``extra.llm_server``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any, Literal, TypedDict

from openai import APIStatusError, OpenAIError

from rag.llm.tokens import TokenCounter

__all__ = [
    "STRUCTURED_MODES",
    "ParameterRefused",
    "PrefillSpeed",
    "ServerProfile",
    "StructuredMode",
    "refused_parameter",
]

logger = logging.getLogger(__name__)

StructuredMode = Literal["json_schema", "json_object", "prompt"]
STRUCTURED_MODES: tuple[StructuredMode, ...] = ("json_schema", "json_object", "prompt")
Api = Literal["chat", "responses"]

# Statuses that never mean "this parameter is not accepted": auth, not found, conflicts and every kind of busy.
_NOT_REFUSALS = frozenset({401, 403, 404, 408, 409, 429, 502, 503, 504})
# The words in an error message that name each parameter we may drop or step down.
_PARAMETER_WORDS: dict[str, tuple[str, ...]] = {
    "response_format": ("response_format", "json_schema", "json_object"),
    "text.format": ("text.format", "json_schema", "json_object", "'format'"),
    "stream_options": ("stream_options", "include_usage"),
}
_SHOWN_REFUSALS = 5


class ParameterRefused(OpenAIError):
    """The server refused a request for what it asked, not for load: nothing left to step down (or an API the
    server lacks). The call policy does not retry it."""

    def __init__(self, message: str, *, parameter: str, status: int | None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.status = status


def _message(exc: APIStatusError) -> str:
    body = exc.body
    try:
        text = json.dumps(body) if body is not None else ""
    except (TypeError, ValueError):
        text = str(body)
    return f"{exc.message} {text}"


def refused_parameter(exc: APIStatusError, sent: Iterable[str]) -> str | None:
    """Which of the ``sent`` parameters the error names as refused, or None when it is not such a refusal."""
    if exc.status_code < 400 or exc.status_code in _NOT_REFUSALS:
        return None
    text = _message(exc).lower()
    for parameter in sent:
        if any(word in text for word in _PARAMETER_WORDS.get(parameter, (parameter,))):
            return parameter
    return None


class PrefillSpeed:
    """Seconds per prompt token before the first token, learned from finished calls (a moving average): the first
    token's time of a streamed call, the whole time of a non-streamed one (an upper bound: it includes the reply),
    and, as a lower bound, the time a call waited before giving up.

    A call's first-token deadline is ``max(floor, margin x prompt tokens x seconds per token)``: on a GPU server
    (thousands of tokens a second) the floor rules; on a CPU one a long prompt gets the time its prefill takes.
    Calls with short prompts teach nothing (fixed costs dominate) and are not counted.
    """

    MIN_TOKENS = 64
    ALPHA = 0.3

    def __init__(self, margin: float = 2.0) -> None:
        self.margin = margin
        self.seconds_per_token: float | None = None
        self.samples = 0

    def observe(self, prompt_tokens: int, first_token_seconds: float) -> None:
        if prompt_tokens < self.MIN_TOKENS or first_token_seconds <= 0:
            return
        sample = first_token_seconds / prompt_tokens
        current = self.seconds_per_token
        self.seconds_per_token = sample if current is None else current + self.ALPHA * (sample - current)
        self.samples += 1

    def at_least(self, prompt_tokens: int, seconds: float) -> None:
        """A call gave up after ``seconds`` without its first token (or its reply): reading the prompt takes at
        least that long, so the next long prompt gets more time. Without this a server slower than the floor would
        never finish a call to learn from."""
        if prompt_tokens < self.MIN_TOKENS or seconds <= 0:
            return
        bound = seconds / prompt_tokens
        if self.seconds_per_token is None or self.seconds_per_token < bound:
            self.seconds_per_token = bound
        self.samples += 1

    def expected(self, prompt_tokens: int) -> float:
        """Seconds the server is expected to take to read ``prompt_tokens`` (0 until it has been measured)."""
        return 0.0 if self.seconds_per_token is None else prompt_tokens * self.seconds_per_token

    def first_token_timeout(self, floor: float, prompt_tokens: int) -> float:
        return max(floor, self.margin * self.expected(prompt_tokens))


class ProfileStats(TypedDict):
    base_url: str
    structured_output: dict[str, StructuredMode]
    stream_options: bool | None
    stream_usage: bool | None
    responses_api: bool | None
    reasoning_field: str | None
    tokenizer: str | None
    prefill_ms_per_1k_tokens: float | None
    prefill_samples: int
    refusals: list[dict[str, Any]]


class ServerProfile:
    """One LLM server's capabilities as this process learned them (thread-safe: the console reads it from views).

    ``None`` means not known yet; a capability is learned on the first refusal (or the first success) and kept.
    """

    def __init__(self, base_url: str, *, prefill_margin: float = 2.0) -> None:
        self.base_url = base_url
        self._lock = threading.Lock()
        self._structured: dict[str, StructuredMode] = {"chat": "json_schema", "responses": "json_schema"}
        self.stream_options: bool | None = None
        self.stream_usage: bool | None = None
        self.responses_api: bool | None = None
        self.reasoning_field: str | None = None
        self._refusals: list[dict[str, Any]] = []
        self.tokens = TokenCounter(base_url)
        self.prefill = PrefillSpeed(prefill_margin)

    def structured_mode(self, api: str) -> StructuredMode:
        with self._lock:
            return self._structured.get(api, "json_schema")

    def _refused(self, api: str, parameter: str, status: int | None, detail: str, now: str) -> None:
        entry = {"api": api, "parameter": parameter, "status": status, "detail": detail[:200], "now": now}
        self._refusals = [*self._refusals, entry][-_SHOWN_REFUSALS:]
        logger.warning(
            "llm server %s refused %s on %s (HTTP %s: %s); from now on: %s",
            self.base_url,
            parameter,
            api,
            status,
            detail[:200],
            now,
        )

    def structured_refused(self, api: str, mode: StructuredMode, exc: APIStatusError) -> bool:
        """``mode`` was refused on ``api``: step down; False when there is no step left."""
        with self._lock:
            current = self._structured.get(api, "json_schema")
            if current != mode:
                return True  # another call already stepped down: try again with the current mode
            following = STRUCTURED_MODES.index(mode) + 1
            if following >= len(STRUCTURED_MODES):
                return False
            stepped = self._structured[api] = STRUCTURED_MODES[following]
            self._refused(api, mode, exc.status_code, exc.message, f"structured output as {stepped}")
            return True

    def stream_options_refused(self, api: str, exc: APIStatusError) -> None:
        with self._lock:
            if self.stream_options is False:
                return
            self.stream_options = False
            self._refused(api, "stream_options", exc.status_code, exc.message, "streams without stream_options")

    def responses_missing(self, status: int) -> None:
        with self._lock:
            if self.responses_api is False:
                return
            self.responses_api = False
            self._refused("responses", "/responses", status, "no Responses API", "the responses backend cannot answer")

    def stream_done(self, api: str, *, usage: bool, options_sent: bool, reasoning_field: str | None) -> None:
        """A stream finished: what it showed of the server (usage sent or not, where its reasoning came)."""
        with self._lock:
            if options_sent and self.stream_options is None:
                self.stream_options = True
            if self.stream_usage is None or usage:
                self.stream_usage = usage
            if api == "responses":
                self.responses_api = True
            if reasoning_field and self.reasoning_field is None:
                self.reasoning_field = reasoning_field
                logger.info("llm server %s streams reasoning as %s", self.base_url, reasoning_field)

    def answered(self, api: str) -> None:
        if api == "responses":
            with self._lock:
                self.responses_api = True

    def stats(self) -> ProfileStats:
        with self._lock:
            spt = self.prefill.seconds_per_token
            return {
                "base_url": self.base_url,
                "structured_output": dict(self._structured),
                "stream_options": self.stream_options,
                "stream_usage": self.stream_usage,
                "responses_api": self.responses_api,
                "reasoning_field": self.reasoning_field,
                "tokenizer": self.tokens.endpoint,
                "prefill_ms_per_1k_tokens": None if spt is None else round(spt * 1e6, 1),
                "prefill_samples": self.prefill.samples,
                "refusals": list(self._refusals),
            }
