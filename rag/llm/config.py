"""Plain configuration of the LLM client and its call policy.

Nothing here reads Django settings: the composition root (rag.wiring) builds these from settings once and passes
them in, so the LLM package can be used and tested without Django.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["BACKENDS", "HTTP_CLIENTS", "CallPolicyConfig", "HttpClient", "LLMConfig"]

# Concurrency-manager backends an LLM call can be made against; "default" exists in the manager too, for
# callers that do not split their limits.
BACKENDS = ("default", "chat", "responses", "embedding")

# The HTTP stack under the openai SDK (LLM_HTTP_CLIENT): its default httpx, or its aiohttp extra, which costs about
# half the CPU per streamed answer. rag.llm.client builds either; the call policy sees the same errors from both.
HttpClient = Literal["httpx", "aiohttp"]
HTTP_CLIENTS: tuple[HttpClient, ...] = ("httpx", "aiohttp")


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")


@dataclass(slots=True)
class LLMConfig:
    """Where the OpenAI-compatible servers are, which models to use, and how long anything may take."""

    base_url: str
    api_key: str = "EMPTY"
    chat_model: str = "qwen2.5-7b-instruct"
    # Empty: the chat model (vLLM serves both APIs from one model).
    responses_model: str = ""
    # Per pipeline node ("planner", "response_synth", ...): a model or a temperature that overrides the default.
    node_models: dict[str, str] = field(default_factory=dict)
    node_temperatures: dict[str, float] = field(default_factory=dict)
    # TCP connect to the server.
    connect_timeout: float = 5.0
    # From sending a request until the first answer/reasoning delta (streaming) of one attempt.
    first_token_timeout: float = 30.0
    # Longest silence between two chunks once the answer is streaming.
    between_tokens_timeout: float = 15.0
    # The whole call: rate-limit wait, slot wait, every attempt and every backoff sleep.
    total_timeout: float = 120.0
    # Embeddings: empty base_url means the same server as the LLM; empty api_key the same key.
    embedding_base_url: str = ""
    embedding_api_key: str = ""
    embedding_model: str = "bge-m3"
    embedding_dim: int = 1024
    # Texts per /v1/embeddings request (vLLM and OpenAI cap the batch size).
    embedding_batch_size: int = 64
    # The HTTP stack of the clients (see HttpClient).
    http_client: HttpClient = "aiohttp"

    def __post_init__(self) -> None:
        if not (self.base_url or self.embedding_base_url):
            # Embeddings alone may be real (EMBEDDING_BASE_URL) while answers stay offline; nothing at all is a bug.
            raise ValueError("LLMConfig needs base_url or embedding_base_url (the offline backend is used without)")
        for name in ("connect_timeout", "first_token_timeout", "between_tokens_timeout", "total_timeout"):
            _positive(name, getattr(self, name))
        if self.embedding_dim < 1 or self.embedding_batch_size < 1:
            raise ValueError("embedding_dim and embedding_batch_size must be >= 1")
        if self.http_client not in HTTP_CLIENTS:
            raise ValueError(f"http_client must be one of {', '.join(HTTP_CLIENTS)}, got {self.http_client!r}")

    def model_for(self, backend: str, node: str) -> str:
        override = self.node_models.get(node)
        if override:
            return override
        if backend == "responses" and self.responses_model:
            return self.responses_model
        return self.chat_model

    def temperature_for(self, node: str) -> float | None:
        return self.node_temperatures.get(node)

    @property
    def embeddings_url(self) -> str:
        return self.embedding_base_url or self.base_url

    @property
    def embeddings_key(self) -> str:
        return self.embedding_api_key or self.api_key


@dataclass(slots=True)
class CallPolicyConfig:
    """Rate limit and retry rules applied to every LLM call (see rag.llm.policy)."""

    # Requests (attempts) per rolling window per backend; a missing backend or 0 means unlimited.
    rpm: dict[str, int] = field(default_factory=dict)
    # Window length of the requests-per-minute limiter. A parameter so tests need not wait a minute.
    rpm_window: float = 60.0
    # Attempts per call, the first one included.
    max_attempts: int = 8
    # Backoff before retry n (n = 1, 2, ...): min(backoff_max, backoff_base * 2 ** (n - 1)), scaled by a random
    # factor in [0, 1) when jitter is on ("full jitter": spreads a herd of retries over the whole interval).
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    jitter: bool = True
    # A server asking us to wait longer than this (Retry-After) is not waited for: the call fails at once with
    # the server's retry_after, so the user hears "busy, retry in N s" rather than staring at a spinner.
    retry_after_cap: float = 30.0
    # Seconds from a call's first attempt after which no retry starts: an LLM that fails every call ends the
    # request with upstream_error (or busy) while the user still waits, not after the whole call deadline.
    retry_budget: float = 20.0
    # Seconds to wait for a requests-per-minute spot and a concurrency slot, unless the call gives its own
    # (rag.llm.policy.SlotTerms.wait); None = the manager's own acquire_timeout. The total deadline starts when the
    # call holds its slot; a retry's wait is capped by what is left of it.
    acquire_timeout: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for backend, limit in self.rpm.items():
            if limit < 0:
                raise ValueError(f"rpm[{backend!r}] must be >= 0 (0 = unlimited), got {limit}")
        _positive("rpm_window", self.rpm_window)
        if self.backoff_base < 0 or self.backoff_max < 0 or self.retry_after_cap < 0 or self.retry_budget < 0:
            raise ValueError("backoff_base, backoff_max, retry_after_cap and retry_budget must be >= 0")
        if self.acquire_timeout is not None and self.acquire_timeout < 0:
            raise ValueError(f"acquire_timeout must be >= 0, got {self.acquire_timeout}")

    def rpm_for(self, backend: str) -> int:
        return self.rpm.get(backend, 0)
