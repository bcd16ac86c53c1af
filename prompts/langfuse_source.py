"""Prompts from Langfuse prompt management (`PROMPT_SOURCE = "langfuse"`).

Uses the SDK's REST client (`langfuse.api.LangfuseAPI`, `prompts.get` -> GET
`/api/public/v2/prompts/{name}?label=...`) rather than the `Langfuse` tracing client: that client is a
process-wide singleton per public key that also owns the trace exporter (creating it here would fix the
telemetry settings for everyone), and it keeps its own prompt cache and retries, which would duplicate
`prompts.memory` and stretch a failing fetch far past a short timeout. Here: one attempt, a short timeout, no
retries; the caller falls back to the database on any error.

Blocking I/O: call from a thread (`asyncio.to_thread`) in async code.
"""

from __future__ import annotations

import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

from prompts.errors import PromptError, PromptSourceError
from prompts.memory import LangfuseSettings
from prompts.snapshot import PromptSnapshot, snapshot_build

if TYPE_CHECKING:
    from langfuse.api import LangfuseAPI

_clients: dict[LangfuseSettings, LangfuseAPI] = {}
_clients_lock = threading.Lock()


def _client(config: LangfuseSettings) -> LangfuseAPI:
    client = _clients.get(config)
    if client is None:
        with _clients_lock:
            client = _clients.get(config)
            if client is None:
                # Imported on first use: the SDK pulls in OpenTelemetry, which a database-only worker never needs.
                from langfuse.api import LangfuseAPI

                client = LangfuseAPI(
                    base_url=config.host,
                    username=config.public_key,
                    password=config.secret_key,
                    x_langfuse_sdk_name="python",
                    x_langfuse_public_key=config.public_key,
                    timeout=config.timeout,
                    follow_redirects=False,
                )
                _clients[config] = client
    return client


def _request_options(timeout: float) -> Any:
    # The SDK types the timeout as int seconds; httpx takes a float, and a sub-second timeout is the point.
    return {"timeout_in_seconds": timeout, "max_retries": 0}


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)  # the SDK's ApiError; its str() carries every header
    if isinstance(status, int):
        return f"{type(exc).__name__} (HTTP {status})"
    return f"{type(exc).__name__}: {exc}"


def langfuse_prompt_fetch(*, config: LangfuseSettings, name: str, label: str) -> PromptSnapshot:
    """The text prompt `name` with `label` from Langfuse, checked against the catalogue like a local edit.

    Raises PromptSourceError for anything unusable: unreachable, timeout, 4xx/5xx, a chat prompt, or a
    template the catalogue refuses (unknown variable, unbalanced braces).
    """
    try:
        prompt = _client(config).prompts.get(
            urllib.parse.quote(name, safe=""),
            label=label,
            request_options=_request_options(config.timeout),
        )
    except Exception as exc:
        raise PromptSourceError(f"Langfuse prompt {name!r} label {label!r}: {_describe(exc)}") from exc
    if prompt.type != "text" or not isinstance(prompt.prompt, str):
        raise PromptSourceError(f"Langfuse prompt {name!r} is a {prompt.type} prompt; only text prompts are used")
    config_value = prompt.config if isinstance(prompt.config, dict) else {}
    try:
        return snapshot_build(
            name=name,
            version=prompt.version,
            labels=prompt.labels,
            template=prompt.prompt,
            config=config_value,
            source="langfuse",
        )
    except PromptError as exc:
        raise PromptSourceError(f"Langfuse prompt {name!r} v{prompt.version} refused: {exc}") from exc
