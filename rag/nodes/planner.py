"""planner: decide what the question needs: retrieval, a transform of the previous answer, or a direct reply.

Offline, bilingual keyword rules decide. With an LLM, a JSON-schema call does, and its plan is made consistent
with the routes (a follow-up without a previous answer is a new question; FAQ and form questions always
search, because the answer may only come from the help centre). A reply that does not fit the schema, a timeout,
an upstream error or a full queue falls back to the rules: the answer matters more than the plan. The status
event says which one decided (`plan_source`: llm, rules, rules_fallback) and why it fell back.

The model's call waits at most `slot_wait` seconds for an LLM slot; past that it is skipped before it starts (the
status event's `skipped` and `meta_summary`'s `skipped` say so, the concurrency console counts it), and `timeout`
counts from when the call holds its slot, so a plan being decoded is never cut because the queue was long.
"""

from __future__ import annotations

from typing import Any, Literal

from rag.deps import PipelineDeps, PromptProvider
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.llm.policy import SlotTerms
from rag.llm.structured import StructuredOutput, output_schema
from rag.prompting import calls
from rag.prompting.followup import canonical_instruction
from rag.prompting.prompts import PLANNER
from rag.rules.planner_rules import (
    CONVERSATION_FOLLOWUP,
    OUT_OF_SCOPE,
    ROUTE_DIRECT,
    ROUTE_FOLLOWUP,
    ROUTE_RETRIEVE,
    SIMPLE_FAQ,
    OfflinePlan,
    plan_offline,
)
from rag.state import PipelineState

NAME = "planner"
INPUTS = ("normalized_question", "language", "previous_answer")
OUTPUTS = ("intent", "should_retrieve", "followup_instruction", "plan_source")

# rag.state.INTENTS, spelled out for the type checker (a test keeps the two equal)
Intent = Literal["simple_faq", "form_download", "form_export", "conversation_followup", "out_of_scope"]


class PlanOutput(StructuredOutput):
    """The plan the model is asked for; `reconcile` makes it consistent with the routes."""

    intent: Intent
    should_retrieve: bool
    followup_instruction: str


PLAN_SCHEMA = output_schema(PlanOutput)  # what the server is sent
_MAX_INSTRUCTION_CHARS = 300


class Planner:
    name = NAME

    def __init__(
        self,
        *,
        llm: Any = None,
        prompts: PromptProvider | None = None,
        timeout: float = 10.0,
        slot_wait: float = 3.0,
        history_turns: int = 2,
        history_chars: int = 800,
    ) -> None:
        self._llm = llm
        self._prompts = calls.prompt_provider(prompts)
        self._timeout = timeout
        self._slot = SlotTerms(wait=slot_wait, auxiliary=NAME)
        self._history_turns = history_turns
        self._history_chars = history_chars

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        rules = self._rules(state)
        # An instruction about the previous answer ("More Concise", "簡短一點", "in English please": a client's
        # regenerate-with-instruction) is recognised by the rules without a model call: a model that read it as a
        # new question sent it to the retriever, and the answer cited whatever "concise" matched.
        if self._llm is None or rules.intent == CONVERSATION_FOLLOWUP:
            return await self._apply(state, writer, rules, source="rules")
        try:
            plan, adjusted = await self._plan_with_llm(state, writer)
        except calls.FALLBACK_ERRORS as exc:
            calls.log_fallback(NAME, exc)
            await calls.record_rejected_usage(state, writer, self.name, exc, call="plan")
            return await self._apply(
                state,
                writer,
                rules,
                source="rules_fallback",
                fallback_reason=calls.fallback_reason(exc),
                detail=calls.fallback_detail(exc),
                **calls.skipped(state, NAME, exc),
            )
        extra = {"adjusted": adjusted} if adjusted else {}
        return await self._apply(state, writer, plan, source="llm", **extra)

    @staticmethod
    def _rules(state: PipelineState) -> OfflinePlan:
        return plan_offline(state.normalized_question, previous_answer=state.previous_answer)

    async def _apply(
        self, state: PipelineState, writer: StreamWriter, plan: OfflinePlan, *, source: str, **extra: Any
    ) -> str:
        state.intent = plan.intent
        state.should_retrieve = plan.should_retrieve
        state.followup_instruction = plan.followup_instruction
        state.plan_source = source
        await writer.emit(
            self.name,
            "status",
            "plan",
            intent=plan.intent,
            should_retrieve=plan.should_retrieve,
            followup_instruction=plan.followup_instruction,
            plan_source=source,
            **extra,
        )
        return plan.route

    async def _plan_with_llm(self, state: PipelineState, writer: StreamWriter) -> tuple[OfflinePlan, list[str]]:
        snapshot = await calls.load_prompt(self._prompts, PLANNER)
        system = calls.render(snapshot, PLANNER, language=state.language, summary=state.summary)
        messages = [
            {"role": "system", "content": system},
            *calls.history_messages(state.history, turns=self._history_turns, max_chars=self._history_chars),
            {"role": "user", "content": state.normalized_question},
        ]
        result = await self._llm.complete(
            backend=state.backend,
            node=NAME,
            messages=messages,
            output=PlanOutput,
            schema_name="plan",
            total_timeout=self._timeout,
            slot=self._slot,
            **calls.call_options(self._llm, snapshot, node=NAME),
        )
        await calls.record_usage(state, writer, self.name, result.usage, call="plan")
        return reconcile(result.parsed, question=state.normalized_question, previous_answer=state.previous_answer)


def reconcile(raw: PlanOutput, *, question: str, previous_answer: str) -> tuple[OfflinePlan, list[str]]:
    """The model's plan made consistent with the routes; also the names of the fields that changed."""
    intent: str = raw.intent
    wants_retrieval = raw.should_retrieve
    sentence = " ".join(raw.followup_instruction.split())[:_MAX_INSTRUCTION_CHARS]
    adjusted: list[str] = []
    if intent == CONVERSATION_FOLLOWUP and not previous_answer.strip():
        # Nothing to transform: answer it as a question of its own.
        intent = SIMPLE_FAQ
        adjusted.append("intent")
    if intent == CONVERSATION_FOLLOWUP:
        # The user's own words first ("簡短一點" -> shorten), so offline transforms and fallbacks understand it;
        # the model's sentence when it says more than a known transform ("explain step 2").
        instruction = canonical_instruction(question) or canonical_instruction(sentence) or sentence or question
        if wants_retrieval:
            # A follow-up that needs new material: search again (for the earlier question) and answer.
            return OfflinePlan(intent, True, instruction, ROUTE_RETRIEVE), adjusted
        return OfflinePlan(intent, False, instruction, ROUTE_FOLLOWUP), adjusted
    if sentence:
        adjusted.append("followup_instruction")
    if intent == OUT_OF_SCOPE:
        if wants_retrieval:
            adjusted.append("should_retrieve")
        return OfflinePlan(intent, False, "", ROUTE_DIRECT), adjusted
    # simple_faq, form_download, form_export: the help centre is the only allowed source of an answer, and the form
    # list is what a form answer (or export) is made of, so these always search.
    if not wants_retrieval:
        adjusted.append("should_retrieve")
    return OfflinePlan(intent, True, "", ROUTE_RETRIEVE), adjusted


def _build(deps: PipelineDeps, params: dict[str, Any]) -> Planner:
    return Planner(llm=deps.llm, prompts=deps.prompts, timeout=params["timeout"], slot_wait=params["slot_wait"])


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Classifies the question (FAQ, form download, form export, follow-up, out of scope) and picks a route; "
        "with an LLM by a JSON-schema call, falling back to the rules.",
        "zh-hant": "判斷問題類型（常見問題、表單下載、表單匯出、追問、範圍外）並決定後續路線；"
        "設定語言模型時以 JSON 結構化輸出判斷，失敗時改用規則。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    routes=(ROUTE_RETRIEVE, ROUTE_FOLLOWUP, ROUTE_DIRECT),
    params={
        "timeout": ParamSpec(
            "float", 10.0, "Seconds the LLM plan may take, once it holds a slot, before the rules decide", minimum=0.1
        ),
        "slot_wait": ParamSpec(
            "float", 3.0, "Seconds the LLM plan may wait for a slot before it is skipped for the rules", minimum=0.0
        ),
    },
)
