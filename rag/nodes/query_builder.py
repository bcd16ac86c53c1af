"""query_builder: the search queries for this pass, with a new strategy on every retry.

Offline, deterministic strategies (the question, its key terms, a title-like phrase). With an LLM, the first
pass of a question asked mid-conversation is rewritten into a standalone query (query-rewriter-system), and
every retry asks for new queries with a named strategy (query-variation-system: synonyms, broader, narrower,
decompose, translate, by loop number). The offline queries fill up to three and replace the model's when it
fails; the status event says which ones ran (`query_source`) and why it fell back.
"""

from __future__ import annotations

import re
from typing import Any

from rag.deps import PipelineDeps, PromptProvider
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.llm.errors import InvalidLLMOutput
from rag.llm.structured import StructuredOutput, output_schema
from rag.prompting import calls
from rag.prompting.prompts import QUERY_REWRITER, QUERY_VARIATION
from rag.rules.queries import MAX_QUERIES, build_queries
from rag.state import PipelineState, Turn
from rag.text.language import ZH_HANS, detect_language, is_chinese, to_traditional

NAME = "query_builder"
INPUTS = ("normalized_question", "language", "history")
OPTIONAL_INPUTS = ("followup_instruction",)  # see response_synth.OPTIONAL_INPUTS
# `loops` is read too, but it is this node's own counter (0 before the first pass), not an upstream input.
OUTPUTS = ("search_query", "queries", "loops")

STRATEGIES = ("synonyms", "broader", "narrower", "decompose", "translate")


class VariationOutput(StructuredOutput):
    """New search queries for a retry. No minItems/maxItems (a length bound on the list): strict structured output
    on some servers refuses them; the count is checked here."""

    queries: list[str]


VARIATION_SCHEMA = output_schema(VariationOutput)  # what the server is sent
_MAX_QUERY_CHARS = 200
_CITATION_RE = re.compile(r"\[\d{1,3}\]")


class QueryBuilder:
    name = NAME

    def __init__(
        self,
        *,
        llm: Any = None,
        prompts: PromptProvider | None = None,
        timeout: float = 8.0,
        strategies: tuple[str, ...] = STRATEGIES,
        history_turns: int = 4,
        history_chars: int = 500,
    ) -> None:
        unknown = [s for s in strategies if s not in STRATEGIES]
        if unknown or not strategies:
            raise ValueError(f"retry strategies must be some of {', '.join(STRATEGIES)}; got {list(strategies)}")
        self._llm = llm
        self._prompts = calls.prompt_provider(prompts)
        self._timeout = timeout
        self._strategies = tuple(strategies)
        self._history_turns = history_turns
        self._history_chars = history_chars

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        tried = list(state.queries)
        if tried:
            state.loops += 1  # a second pass: retrieval_checker sent us back
        # The base query before this pass's: what a retry varies (standalone when the first pass rewrote it).
        base = state.search_query if state.history and state.search_query else state.normalized_question
        plan = build_queries(
            state.normalized_question,
            language=state.language,
            loops=state.loops,
            previous_question=_previous_question(state.history),
            instruction=state.followup_instruction,
            tried=tried,
        )
        queries, strategy = plan.queries, plan.strategy
        if self._llm is not None and state.loops:
            strategy = self._strategies[(state.loops - 1) % len(self._strategies)]
            queries, extra = await self._vary(state, writer, base, strategy, offline=queries, tried=tried)
            if extra.get("query_source") == "rules_fallback":
                strategy = plan.strategy
            await writer.emit(self.name, "status", "retry", loop=state.loops, strategy=strategy, **extra)
        elif self._llm is not None and state.history:
            queries, extra = await self._rewrite(state, writer, offline=queries)
            await writer.emit(self.name, "status", "rewrite", **extra)
        elif state.loops:
            await writer.emit(self.name, "status", "retry", loop=state.loops, strategy=strategy)
        state.queries = queries
        state.search_query = queries[0]
        return None

    async def _rewrite(
        self, state: PipelineState, writer: StreamWriter, *, offline: list[str]
    ) -> tuple[list[str], dict[str, Any]]:
        """The question made standalone from the conversation, then the offline queries."""
        question = state.normalized_question
        try:
            snapshot = await calls.load_prompt(self._prompts, QUERY_REWRITER)
            system = calls.render(
                snapshot,
                QUERY_REWRITER,
                question=question,
                summary=state.summary,
                history=calls.history_transcript(
                    state.history, turns=self._history_turns, max_chars=self._history_chars
                ),
            )
            result = await self._llm.complete(
                backend=state.backend,
                node=NAME,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
                total_timeout=self._timeout,
                **calls.call_options(self._llm, snapshot, node=NAME),
            )
            await calls.record_usage(state, writer, self.name, result.usage, call="rewrite")
            rewritten = _clean(result.text, state.language)
            if not rewritten:
                raise InvalidLLMOutput("empty query", text=result.text)
        except calls.FALLBACK_ERRORS as exc:
            return offline, _fallback(exc)
        return _unique([rewritten, *offline])[:MAX_QUERIES], {"query_source": "llm"}

    async def _vary(
        self,
        state: PipelineState,
        writer: StreamWriter,
        base: str,
        strategy: str,
        *,
        offline: list[str],
        tried: list[str],
    ) -> tuple[list[str], dict[str, Any]]:
        """New queries by `strategy`, then the offline ones, never one already searched when others are left."""
        try:
            snapshot = await calls.load_prompt(self._prompts, QUERY_VARIATION)
            system = calls.render(snapshot, QUERY_VARIATION, question=base, strategy=strategy)
            result = await self._llm.complete(
                backend=state.backend,
                node=NAME,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": base}],
                output=VariationOutput,
                schema_name="query_variation",
                total_timeout=self._timeout,
                **calls.call_options(self._llm, snapshot, node=NAME),
            )
            await calls.record_usage(state, writer, self.name, result.usage, call="vary")
            # "translate" writes in the other language: keep the model's script then, except Simplified.
            language = "" if strategy == "translate" else state.language
            proposed = [_clean(q, language) for q in result.parsed.queries]
            proposed = [q for q in proposed if q]
            if not proposed:
                raise InvalidLLMOutput("no usable query in the reply", text=result.text)
        except calls.FALLBACK_ERRORS as exc:
            await calls.record_rejected_usage(state, writer, self.name, exc, call="vary")
            return offline, _fallback(exc)
        candidates = _unique([*proposed[:MAX_QUERIES], *offline])
        fresh = [q for q in candidates if q not in tried]
        return (fresh or candidates)[:MAX_QUERIES], {"query_source": "llm"}


def _fallback(exc: BaseException) -> dict[str, Any]:
    calls.log_fallback(NAME, exc)
    return {"query_source": "rules_fallback", "fallback_reason": calls.fallback_reason(exc)}


def _clean(text: str, language: str) -> str:
    # Citation markers are no search terms (a model that has just answered with [1] may repeat the habit).
    query = " ".join(_CITATION_RE.sub(" ", calls.one_line(text, max_chars=_MAX_QUERY_CHARS)).split())
    # Searches run on the corpus script: a Simplified query (the model's habit) is converted like the question.
    if query and (is_chinese(language) or not language) and detect_language(query) == ZH_HANS:
        query = to_traditional(query)
    return query


def _unique(queries: list[str]) -> list[str]:
    return list(dict.fromkeys(" ".join(q.split()) for q in queries if q.strip()))


def _previous_question(history: list[Turn]) -> str:
    """The user's last question before this one, in the same script as the normalised question."""
    for turn in reversed(history):
        if turn.role == "user":
            text = " ".join(turn.content.split())
            return to_traditional(text) if detect_language(text) == ZH_HANS else text
    return ""


def _build(deps: PipelineDeps, params: dict[str, Any]) -> QueryBuilder:
    return QueryBuilder(
        llm=deps.llm,
        prompts=deps.prompts,
        timeout=params["timeout"],
        strategies=tuple(params["retry_strategies"]),
    )


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Builds up to three search queries; each retry uses a different strategy. With an LLM, rewrites "
        "follow-ups into standalone queries and varies retries (synonyms, broader, narrower, decompose, translate).",
        "zh-hant": "產生最多三組檢索查詢；每次重試改用不同策略。設定語言模型時，將追問改寫為獨立查詢，"
        "並以同義詞、擴大、縮小、拆解、翻譯等策略重試。",
    },
    inputs=INPUTS,
    optional_inputs=OPTIONAL_INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={
        "timeout": ParamSpec("float", 8.0, "Seconds an LLM rewrite may take before the offline queries run", 0.1),
        "retry_strategies": ParamSpec(
            "list", list(STRATEGIES), "LLM retry strategies, one per loop in this order (then from the start)"
        ),
    },
)
