"""The pipeline's events as OpenAI objects: `chat.completion.chunk` while streaming, `chat.completion` at once.

- `answer` deltas are `content`; `reasoning` deltas are `reasoning_content` (as vLLM and DeepSeek send it).
- The answer cites its sources as `[n]` in the text. The sources travel in two extra top-level fields, as
  Perplexity's API sends them (the convention LiteLLM, OpenRouter and the clients that render citations follow):
  `citations`, the sources' URLs in the order of their numbers, and `search_results`, one object per source
  (`ref` is the n of `[n]`, then `title`, `url`, `doc_id`, and for forms `kind`, `form_id`, `download_url`).
  They are on the final chunk (the one with `finish_reason`) and on the non-streamed response.
- The same sources as OpenAI's own `annotations` of type `url_citation` (`url`, `title`, and `start_index` /
  `end_index` of where the source's first `[n]` marker stands in the answer, in characters), on the message and,
  streamed, on a delta of their own just before the final chunk: Open WebUI shows these (and only these) as
  source chips. A source the text does not mark stands at the end of the answer (start = end = its length).
- A link that is relative (a form's download, a file served here) is made absolute with `PUBLIC_BASE_URL`: the
  client shows it on pages of its own, where a relative link would open the client's page.
- `usage` counts the tokens of every LLM call the answer took (planner, query rewriting, synthesis), as the
  pipeline measured them; an answer made without an LLM (the offline backend, a cached answer) counts 0. Counts
  the LLM server did not report (llama.cpp's streams carry none) are counted here and flagged `"estimated": true`.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rag.events import Event
from rag.text.links import http_link

OBJECT_CHUNK = "chat.completion.chunk"
OBJECT_COMPLETION = "chat.completion"


def usage_of(summary: Event) -> dict[str, Any]:
    """OpenAI's usage object; with ``"estimated": true`` beside the counts when some LLM call's server reported
    no usage and it was counted here instead (its tokenizer, or an estimate from the text)."""
    usage = summary.get("usage") or {}
    prompt = int(usage.get("input_tokens", 0))
    completion = int(usage.get("output_tokens", 0))
    counts: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": int(usage.get("total_tokens", prompt + completion)),
    }
    if usage.get("estimated"):
        counts["estimated"] = True
    return counts


def absolute_url(url: str, base_url: str) -> str:
    """`url` as a link that works anywhere: a path on this site gets `base_url` in front ("" keeps it as it is)."""
    if base_url and url.startswith("/") and not url.startswith("//"):
        return base_url.rstrip("/") + url
    return url


def _sources(summary: Event, base_url: str) -> list[dict[str, Any]]:
    sources = []
    for source in sorted(summary.get("sources") or [], key=lambda s: int(s.get("ref", 0))):
        item = dict(source)
        for field in ("url", "download_url"):
            if isinstance(item.get(field), str):
                item[field] = absolute_url(item[field], base_url)
        sources.append(item)
    return sources


def sources_of(summary: Event, *, base_url: str = "") -> dict[str, Any]:
    sources = _sources(summary, base_url)
    return {
        "citations": [http_link(s.get("url", "")) for s in sources],
        "search_results": sources,
    }


def url_citations(text: str, summary: Event, *, base_url: str = "") -> list[dict[str, Any]]:
    """OpenAI's `url_citation` annotations: one per source, where its first `[n]` marker stands in `text`."""
    annotations = []
    for source in _sources(summary, base_url):
        ref = int(source.get("ref", 0))
        marker = re.search(rf"\[{ref}\]", text)
        start, end = (marker.start(), marker.end()) if marker else (len(text), len(text))
        url = str(source.get("download_url") or source.get("url") or "")
        citation = {"url": url, "title": str(source.get("title") or url), "start_index": start, "end_index": end}
        annotations.append({"type": "url_citation", "url_citation": citation})
    return annotations


class CompletionBuilder:
    """Builds the objects of one completion; collects the answer for the non-streamed response."""

    def __init__(self, *, model: str, request_id: str, created: int | None = None, base_url: str = "") -> None:
        self.id = f"chatcmpl-{request_id}"
        self.base_url = base_url
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.content: list[str] = []
        self.reasoning: list[str] = []

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": OBJECT_CHUNK,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": choices,
            **extra,
        }

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]

    def role_chunk(self) -> dict[str, Any]:
        return self._chunk(self._delta({"role": "assistant", "content": ""}))

    def content_chunk(self, text: str) -> dict[str, Any]:
        return self._chunk(self._delta({"content": text}))

    def take(self, event: Event) -> dict[str, Any] | None:
        """The chunk for an `answer` or `reasoning` event (None for the others); the text is kept."""
        channel = event["channel"]
        if channel == "answer":
            self.content.append(event["delta"])
            return self._chunk(self._delta({"content": event["delta"]}))
        if channel == "reasoning":
            self.reasoning.append(event["delta"])
            return self._chunk(self._delta({"reasoning_content": event["delta"]}))
        return None

    def annotations_chunk(self, summary: Event) -> dict[str, Any] | None:
        """The sources as a delta's `annotations` (None when there are none), sent before the final chunk."""
        annotations = url_citations("".join(self.content), summary, base_url=self.base_url)
        return self._chunk(self._delta({"annotations": annotations})) if annotations else None

    def final_chunk(self, summary: Event) -> dict[str, Any]:
        return self._chunk(self._delta({}, "stop"), **sources_of(summary, base_url=self.base_url))

    def usage_chunk(self, summary: Event) -> dict[str, Any]:
        """`stream_options.include_usage`: the last chunk, with no choices and the usage."""
        return self._chunk([], usage=usage_of(summary))

    def completion(self, summary: Event) -> dict[str, Any]:
        text = "".join(self.content)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": url_citations(text, summary, base_url=self.base_url),
        }
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        return {
            "id": self.id,
            "object": OBJECT_COMPLETION,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
            "usage": usage_of(summary),
            **sources_of(summary, base_url=self.base_url),
        }
