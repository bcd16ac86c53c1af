"""What pipeline nodes are given at construction: clients and configuration, loaded once per process.

Nodes never read Django settings, the ORM or globals inside `run`; the runtime builds one `PipelineDeps`
from settings at start-up and every compiled graph shares it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from infra.ratelimit import RateRule
from rag.branding.texts import FixedOrganisation, OrganisationSource
from rag.state import RetrievedChunk
from rag.stats import AnswerStats


class Retriever(Protocol):
    async def search(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> list[RetrievedChunk]:
        """Best chunks for `query`, best first. `kind="form"` restricts to downloadable forms."""
        ...


@dataclass(frozen=True, slots=True)
class SearchReport:
    """A search's chunks, and why it ran without its dense side ("" when it did not: a sparse mode, or the
    embedder answered). Reasons: embedder_timeout, embedder_error, embedder_unavailable (recently failed)."""

    chunks: list[RetrievedChunk]
    fallback: str = ""


@runtime_checkable
class ReportingRetriever(Retriever, Protocol):
    """A retriever that says how it searched (the store's); the tool executor flags a fallback to the client."""

    async def search_report(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> SearchReport: ...


class PromptSnapshot(Protocol):
    """One version of a prompt (prompts.snapshot.PromptSnapshot fits)."""

    @property
    def config(self) -> Mapping[str, Any]:
        """Call hints: model, temperature, max_tokens..."""
        ...

    def render(self, /, **variables: object) -> str: ...


class PromptProvider(Protocol):
    async def get(self, name: str) -> PromptSnapshot:
        """The prompt `name` as the pipeline should use it now (the production label, from memory)."""
        ...


class RateLimiter(Protocol):
    async def admit(self, rules: Sequence[RateRule]) -> tuple[bool, float]:
        """(allowed, retry_after_seconds) for one more request under every rule; counted only when allowed."""
        ...


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    max_question_chars: int = 2000
    # Requests per minute: per client (by its id, or by its address when it sends none) and per address; 0 = off.
    rate_limit_per_client: int = 0
    rate_limit_per_address: int = 0
    blocked_patterns: tuple[str, ...] = ()
    top_k: int = 5
    retrieval_timeout: float = 10.0
    max_retrieval_loops: int = 2
    min_relevance: float = 0.0  # retrieval_checker threshold on the fused score
    default_language: str = "zh-hant"
    forms_base_url: str = "/forms/"
    forms_export_url: str = "/api/v1/rag/forms/export.csv"
    stream_chunk_chars: int = 6  # offline streaming: characters per answer delta
    # when the answer LLM fails for good after retrieval, answer extractively with a notice instead of an error
    degraded_answers: bool = True

    def as_fingerprint(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(slots=True)
class PipelineDeps:
    retriever: Retriever
    config: PipelineConfig = field(default_factory=PipelineConfig)
    rate_limiter: RateLimiter | None = None
    llm: Any = None  # an LLM backend when LLM_BASE_URL is configured; None means the offline rules
    # Where LLM nodes get their prompts; None means the catalogue's built-in defaults (rag.prompting.prompts).
    prompts: PromptProvider | None = None
    cache: Any = None  # the semantic cache, when enabled
    curated: Any = None  # the curated answers (rag.curated.index.CuratedAnswers), when enabled
    answer_stats: AnswerStats = field(default_factory=AnswerStats)  # counts shown in the console
    telemetry: Any = None
    # The organisation's name and words (contact and out-of-scope replies, prompt variables); neutral by default.
    organisation: OrganisationSource = field(default_factory=FixedOrganisation)
    # Run by close(): unsubscribing from live settings and the like.
    cleanups: list[Callable[[], object]] = field(default_factory=list)

    def close(self) -> None:
        """Release what the dependencies hold (the local store's folder lock, settings subscriptions)."""
        while self.cleanups:
            self.cleanups.pop()()
        closer = getattr(self.retriever, "close", None)
        if callable(closer):
            closer()
