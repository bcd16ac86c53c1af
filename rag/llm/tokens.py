"""Token counts for a call whose server reported none (llama.cpp's streams carry no usage, with or without
``stream_options``): counted with the server's own tokenizer endpoint where it has one, else estimated from the
text. Either way the usage is flagged ``estimated``: it is our count, not the server's bill.

Tokenizer endpoints, tried in order until one answers (a server without any is remembered, so the next call
estimates at once): llama-cpp-python's ``POST /extras/tokenize/count`` (``{"input"}`` -> ``{"count"}``) and
vLLM's ``POST /tokenize`` (``{"model", "prompt"}`` -> ``{"count"}``), both at the server's root, beside ``/v1``.
The prompt is counted as its messages' text plus a few tokens per message for the chat template, which the
endpoints do not apply: close, not exact.
"""

from __future__ import annotations

import asyncio
import logging
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
from openai import APIStatusError, AsyncOpenAI, OpenAIError

from rag.llm.streams import raw_post
from rag.state import Usage

__all__ = ["TOKENIZER_ENDPOINTS", "estimate_tokens", "prompt_text", "server_root"]

logger = logging.getLogger(__name__)

# Paths at the server's root, in the order they are tried.
TOKENIZER_ENDPOINTS: tuple[str, ...] = ("/extras/tokenize/count", "/tokenize")
# The chat template's own tokens around each message (role markers, separators): Qwen's and Llama's are 4-5.
TEMPLATE_TOKENS_PER_MESSAGE = 4
TOKENIZE_TIMEOUT = 2.0


def _wide(char: str) -> bool:
    # CJK ideographs, kana, hangul and full-width forms: about one token each in the BPE vocabularies of
    # multilingual models (Qwen, Llama 3), where English runs about four characters a token.
    return unicodedata.east_asian_width(char) in ("W", "F")


def estimate_tokens(text: str) -> int:
    """A token count of ``text`` without a tokenizer: one per wide (CJK) character, one per four others."""
    if not text:
        return 0
    wide = sum(1 for char in text if _wide(char))
    return wide + math.ceil((len(text) - wide) / 4)


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The text of the messages' string contents (and text parts), and how many messages there are."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "\n".join(parts), len(messages)


def server_root(base_url: str) -> str:
    """``http://host:8080/v1`` -> ``http://host:8080``: where the tokenizer endpoints live."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _count_with(client: AsyncOpenAI, url: str, path: str, model: str, text: str) -> int | None:
    body: dict[str, Any] = {"input": text} if path == "/extras/tokenize/count" else {"model": model, "prompt": text}
    async with asyncio.timeout(TOKENIZE_TIMEOUT):
        response = await raw_post(client, url, body)
    count = response.json().get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


class TokenCounter:
    """Counts tokens for one server; remembers which tokenizer endpoint it has (or that it has none)."""

    def __init__(self, base_url: str) -> None:
        self._root = server_root(base_url)
        # None: not tried yet; "": none answers; else the path that does.
        self.endpoint: str | None = None

    async def count(self, client: AsyncOpenAI, model: str, text: str) -> int | None:
        """The server's count of ``text``'s tokens, or None when it cannot say (no endpoint, a failure)."""
        if self.endpoint == "" or not text:
            return None if self.endpoint == "" else 0
        paths = (self.endpoint,) if self.endpoint else TOKENIZER_ENDPOINTS
        refused = 0  # endpoints that answered with an error status: the server has no such endpoint
        for path in paths:
            try:
                count = await _count_with(client, self._root + path, path, model, text)
            except (OpenAIError, TimeoutError, ValueError, httpx2.HTTPError) as exc:
                logger.debug("tokenizer %s%s failed: %s", self._root, path, type(exc).__name__)
                refused += isinstance(exc, APIStatusError)
                count = None
            if count is not None:
                if self.endpoint is None:
                    logger.info("llm server %s: counting tokens with %s", self._root, path)
                self.endpoint = path
                return count
        # Only a server that answered "no" to every endpoint has none; one that was down is asked again next time.
        if self.endpoint is None and refused == len(paths):
            self.endpoint = ""
            logger.info("llm server %s: no tokenizer endpoint, token counts are estimated from the text", self._root)
        return None

    async def usage(self, client: AsyncOpenAI, model: str, messages: Sequence[Mapping[str, Any]], output: str) -> Usage:
        """The estimated usage of a call that sent ``messages`` and got ``output`` back."""
        text, count = prompt_text(messages)
        prompt = await self.count(client, model, text)
        if prompt is None:
            prompt = estimate_tokens(text)
        completion = await self.count(client, model, output) if output else 0
        if completion is None:
            completion = estimate_tokens(output)
        prompt += TEMPLATE_TOKENS_PER_MESSAGE * count
        return Usage(prompt, completion, prompt + completion, estimated=True)
