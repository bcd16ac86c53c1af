"""The state that flows through a pipeline run.

One mutable object per request. Nodes read the fields named as their inputs and write the fields named as
their outputs (declared in the node catalogue), so the engine can check a workflow's wiring when it is built.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rag.events import UsageCounts

LANGUAGES = ("zh-hant", "zh-hans", "en", "other")
INTENTS = ("simple_faq", "form_download", "form_export", "conversation_followup", "out_of_scope")
ERROR_CODES = ("bad_request", "blocked", "busy", "timeout", "upstream_error", "cancelled", "internal")


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


@dataclass(slots=True)
class PipelineError:
    code: str
    message: str
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if self.code not in ERROR_CODES:
            raise ValueError(f"unknown error code {self.code!r}")


@dataclass(slots=True)
class Attachment:
    """A file offered for download with the answer (a form, or a generated CSV export)."""

    name: str
    url: str
    media_type: str


@dataclass(slots=True)
class SkippedStep:
    """An auxiliary LLM step (the planner...) skipped before its call started, its rules standing in."""

    step: str
    reason: str  # rag.errors.SlotUnavailable.reason: slot_timeout, queue_full, rate_limit

    def as_dict(self) -> dict[str, str]:
        return {"step": self.step, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class CuratedHit:
    """The curated answer a question matched: which one, and how close its question was."""

    curated_id: str
    score: float


@dataclass(slots=True)
class PipelineState:
    # --- request (set by the caller) ---
    request_id: str
    question: str
    backend: str = "chat"
    conversation_id: str = ""
    client_id: str = ""
    # Where the request came from (behind trusted proxies), and whether the client sent an id of its own (a
    # cookie or header): one that did not is rate-limited by its address, since its id is new on every request.
    client_address: str = ""
    client_identified: bool = True
    history: list[Turn] = field(default_factory=list)
    summary: str = ""  # running conversation summary from the previous turn
    # what answers this request: backend, answering model (or "offline") and workflow version (the cache's key)
    producer: str = ""
    # --- language_normalizer ---
    language: str = ""
    normalized_question: str = ""
    previous_answer: str = ""
    # --- cache ---
    cacheable: bool = False
    # a ready answer for cache_response to stream: a semantic-cache entry, or a curated answer (then
    # `curated_hit` says which)
    cache_hit: dict[str, Any] | None = None
    # --- curated answers ---
    curated_hit: CuratedHit | None = None
    # --- planner ---
    intent: str = ""
    should_retrieve: bool = True
    followup_instruction: str = ""
    plan_source: str = ""
    # --- retrieval ---
    search_query: str = ""
    queries: list[str] = field(default_factory=list)
    loops: int = 0
    retrieved: list[RetrievedChunk] = field(default_factory=list)
    retrieval_verdict: str = ""
    # why a search ran on BM25 alone (rag.deps.SearchReport.fallback: the embedder failed), "" when none did
    retrieval_fallback: str = ""
    tools_used: list[str] = field(default_factory=list)
    # --- response ---
    answer: str = ""
    sources: list[Source] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    new_summary: str = ""
    # the model's summary, to be written after the terminal event by whoever stores the conversation (the chat);
    # returns `new_summary` (the offline one) when the call fails or times out. Nobody calls it for the API.
    summary_job: Callable[[], Awaitable[str]] | None = field(default=None, repr=False, compare=False)
    usage: Usage = field(default_factory=Usage)
    # auxiliary steps skipped because their LLM call could not get a slot in time (reported in `meta_summary`)
    skipped: list[SkippedStep] = field(default_factory=list)
    # answered from the passages alone because the answer LLM failed for good (never cached, flagged to the client)
    degraded: bool = False
    # whether this request may be answered degraded at all (an API client wants the error, to retry as it does)
    degraded_allowed: bool = True
    # the reply says that the content holds no answer (the "not found" text with the way to a person)
    refused: bool = False
    # --- outcome ---
    error: PipelineError | None = None
    trace_id: str = ""
    trace_exported: bool = False  # set by telemetry when the request ends: its trace went to the exporter's queue
    nodes_run: list[str] = field(default_factory=list)

    def fail(self, code: str, message: str, *, retry_after: float | None = None) -> None:
        self.error = PipelineError(code=code, message=message, retry_after=retry_after)


# Fields a caller fills before the first node runs; a node may read them without an upstream producer.
REQUEST_FIELDS = frozenset(
    {
        "request_id",
        "question",
        "backend",
        "conversation_id",
        "client_id",
        "client_address",
        "client_identified",
        "history",
        "summary",
        "producer",
        "usage",
        "degraded_allowed",
    }
)
# Fields the runtime keeps for the whole run (its failure, its steps, its trace); every node may read them.
RUN_FIELDS = frozenset({"error", "skipped", "nodes_run", "trace_id", "trace_exported"})
STATE_FIELDS = frozenset(PipelineState.__dataclass_fields__)
