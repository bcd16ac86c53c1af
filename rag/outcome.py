"""What a finished pipeline run tells its callers: the seam between the pipeline and the chat.

A run's state (`rag.state.PipelineState`) is the pipeline's own, read and written by its nodes; nothing outside
`rag` reads it (an import contract says so). A caller (the chat recording an exchange, the publish checks) reads the
run's `PipelineOutcome` instead: typed, frozen, made by `rag.runtime.PipelineRun.outcome()` once the run has ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rag.conversation_summary import SummaryJob
from rag.events import Event, UsageCounts
from rag.state import PipelineState
from rag.values import Source

# What became of a question, as the content team reads it: answered from the passages, refused (retrieval found
# nothing the answer could stand on), out of scope, answered degraded (the LLM failed), failed with an error,
# served from the semantic cache, or answered by a curated answer.
ANSWERED = "answered"
REFUSED = "refused"
OUT_OF_SCOPE = "out_of_scope"
DEGRADED = "degraded"
ERROR = "error"
CACHED = "cached"
CURATED = "curated"
OUTCOMES = (ANSWERED, REFUSED, OUT_OF_SCOPE, DEGRADED, ERROR, CACHED, CURATED)
# the retrieval checker's verdict when retrieval ran out of tries: an answer given on it stands on weak support
_WEAK_VERDICT = "fallback"
CLOSEST_LIMIT = 3


@dataclass(frozen=True, slots=True)
class ClosestArticle:
    """An article retrieval came close to (its best passage's score), shown to the content team beside a refusal."""

    doc_id: str
    title: str
    url: str
    score: float

    def as_dict(self) -> dict[str, str | float]:
        return {"doc_id": self.doc_id, "title": self.title, "url": self.url, "score": self.score}


@dataclass(frozen=True, slots=True)
class PipelineOutcome:
    """A finished run, as its callers see it."""

    error_code: str  # "" when the run answered; else its terminal error's code ("cancelled" when it never ended)
    outcome: str  # one of OUTCOMES
    answer: str  # as the pipeline composed it (a client that went away may have received part of it)
    sources: tuple[Source, ...]
    backend: str
    language: str
    intent: str
    question: str  # normalised (translated for the search when needed)
    cached: bool  # served from the semantic cache
    curated_id: str  # the curated answer that answered, "" when none did
    degraded: bool  # answered from the passages alone because the answer LLM failed
    weak_support: bool  # answered although retrieval ran out of tries without a relevant passage
    best_score: float | None  # the best retrieval score seen; None when no search ran
    closest: tuple[ClosestArticle, ...]  # the articles retrieval came closest to, best first
    usage: UsageCounts  # input, output and total tokens of every call the run made
    trace_id: str
    trace_exported: bool  # the run's trace went to the exporter's queue
    elapsed_ms: float
    # The running conversation summary after this turn, offline ("" when the turn was not answered), and the
    # model's as a job for whoever stores the conversation to run after the terminal event (None: the offline one
    # stands). Planned on every answered turn, whichever nodes the workflow has (`rag.conversation_summary`).
    summary: str
    summary_job: SummaryJob | None = field(default=None, repr=False, compare=False)

    @property
    def answered(self) -> bool:
        return not self.error_code


def outcome_of(state: PipelineState, *, failed: bool) -> str:
    """The outcome of a run whose terminal event was an error (`failed`) or its summary."""
    if failed:
        return ERROR
    if state.curated_hit is not None:
        return CURATED
    if state.cache_hit is not None:
        return CACHED
    if state.degraded:
        return DEGRADED
    if state.intent == OUT_OF_SCOPE:
        return OUT_OF_SCOPE
    if state.refused:
        return REFUSED
    return ANSWERED


def closest_articles(state: PipelineState, limit: int = CLOSEST_LIMIT) -> tuple[ClosestArticle, ...]:
    best: dict[str, ClosestArticle] = {}
    for chunk in state.retrieved:
        key = chunk.doc_id or chunk.url or chunk.title
        if key and (key not in best or chunk.score > best[key].score):
            best[key] = ClosestArticle(doc_id=chunk.doc_id, title=chunk.title, url=chunk.url, score=float(chunk.score))
    return tuple(sorted(best.values(), key=lambda article: -article.score)[:limit])


def error_code_of(terminal: Event | None) -> str:
    """ "" for a run that ended with its summary, the error's code for one that failed, "cancelled" for one that
    never ended."""
    if terminal is None:
        return "cancelled"
    if terminal["channel"] == "meta_summary":
        return ""
    return str(terminal.get("code", "")) or "internal"


def pipeline_outcome(state: PipelineState, *, terminal: Event | None, elapsed_ms: float) -> PipelineOutcome:
    """The outcome of the run whose state is `state` and whose stream ended with `terminal`."""
    error_code = error_code_of(terminal)
    best = max((chunk.score for chunk in state.retrieved), default=None)
    kind = outcome_of(state, failed=bool(error_code))
    answered = not error_code
    return PipelineOutcome(
        error_code=error_code,
        outcome=kind,
        answer=state.answer,
        sources=tuple(state.sources),
        backend=state.backend,
        language=state.language,
        intent=state.intent,
        question=state.normalized_question,
        cached=state.cache_hit is not None and state.curated_hit is None,
        curated_id=state.curated_hit.curated_id if state.curated_hit is not None else "",
        degraded=state.degraded,
        weak_support=kind == ANSWERED and state.retrieval_verdict == _WEAK_VERDICT,
        best_score=None if best is None else float(best),
        closest=closest_articles(state),
        usage={
            "input_tokens": state.usage.input_tokens,
            "output_tokens": state.usage.output_tokens,
            "total_tokens": state.usage.total_tokens,
        },
        trace_id=state.trace_id,
        trace_exported=state.trace_exported,
        elapsed_ms=elapsed_ms,
        summary=state.new_summary if answered else "",
        summary_job=state.summary_job if answered else None,
    )
