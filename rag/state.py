"""The state that flows through a pipeline run.

One mutable object per request. Nodes read the fields named as their inputs and write the fields named as
their outputs (declared in the node catalogue), so the engine can check a workflow's wiring when it is built.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

# The plain values a run shares with its callers live in rag.values; the nodes import them from here too.
from rag.values import RetrievedChunk, Source, Turn, Usage, passage_snippet

__all__ = [
    "ERROR_CODES",
    "INTENTS",
    "LANGUAGES",
    "REQUEST_FIELDS",
    "RUN_FIELDS",
    "STATE_FIELDS",
    "Attachment",
    "CuratedHit",
    "PipelineError",
    "PipelineState",
    "RetrievedChunk",
    "SkippedStep",
    "Source",
    "Turn",
    "Usage",
    "passage_snippet",
]

LANGUAGES = ("zh-hant", "zh-hans", "en", "other")
INTENTS = ("simple_faq", "form_download", "form_export", "conversation_followup", "out_of_scope")
ERROR_CODES = ("bad_request", "blocked", "busy", "timeout", "upstream_error", "cancelled", "internal")


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
