"""The plain values a pipeline run shares with its callers: a conversation turn (the request's history), a
retrieved passage, a cited source and token usage (the run's outcome).

They sit apart from the run's state (`rag.state`), which only the pipeline reads: the chat, the OpenAI API and the
commands import them from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rag.events import UsageCounts


@dataclass(slots=True)
class Turn:
    role: str  # "user" | "assistant"
    content: str


@dataclass(slots=True)
class RetrievedChunk:
    chunk_id: str
    doc_id: str
    title: str
    url: str
    text: str
    score: float
    language: str = ""
    heading: str = ""
    kind: str = "article"  # "article" | "form"
    form_id: str = ""
    form_file: str = ""
    tags: tuple[str, ...] = ()


SNIPPET_CHARS = 280


_MARKUP_RE = re.compile(r"\*\*|__|`|^#{1,6}\s+", re.MULTILINE)


def passage_snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """A passage's preview: its text on one line, without Markdown's emphasis and heading marks (the page shows
    it as plain text), cut at a word (or, in Chinese, anywhere) near `limit`."""
    flat = " ".join(_MARKUP_RE.sub("", text).split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", limit // 2, limit)
    return flat[: cut if cut > 0 else limit].rstrip() + "…"


@dataclass(slots=True)
class Source:
    """A numbered source cited in the answer as [ref]."""

    ref: int
    doc_id: str
    title: str
    url: str
    chunk_id: str = ""
    kind: str = "article"
    form_id: str = ""
    download_url: str = ""
    snippet: str = ""  # the start of the cited passage, shown as its preview

    @classmethod
    def from_chunk(cls, chunk: RetrievedChunk, *, ref: int, download_url: str = "") -> Source:
        """The source numbered `ref` that cites `chunk`, previewed by the start of its passage."""
        return cls(
            ref=ref,
            doc_id=chunk.doc_id,
            title=chunk.title,
            url=chunk.url,
            chunk_id=chunk.chunk_id,
            kind=chunk.kind,
            form_id=chunk.form_id,
            download_url=download_url,
            snippet=passage_snippet(chunk.text),
        )

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, ref: int) -> Source:
        """A Source from its `as_dict()` form (a cached answer's); `ref` stands in when the entry has none, and
        entries written by older versions may lack the optional keys."""
        return cls(
            ref=int(raw.get("ref") or ref),
            doc_id=str(raw.get("doc_id", "")),
            title=str(raw.get("title", "")),
            url=str(raw.get("url", "")),
            chunk_id=str(raw.get("chunk_id", "")),
            kind=str(raw.get("kind", "article")),
            form_id=str(raw.get("form_id", "")),
            download_url=str(raw.get("download_url", "")),
            snippet=str(raw.get("snippet", "")),
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref": self.ref, "doc_id": self.doc_id, "title": self.title, "url": self.url}
        if self.snippet:
            out["snippet"] = self.snippet
        if self.kind == "form":
            out.update(kind="form", form_id=self.form_id, download_url=self.download_url)
        return out


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    # Counted by us, not reported by the server (see rag.events.UsageCounts.estimated); a sum is estimated when
    # any of its parts is.
    estimated: bool = False

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.total_tokens += other.total_tokens
        self.estimated = self.estimated or other.estimated

    def as_dict(self) -> UsageCounts:
        counts: UsageCounts = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.estimated:
            counts["estimated"] = True
        return counts
