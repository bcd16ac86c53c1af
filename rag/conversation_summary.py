"""The running conversation summary after an answered turn: the offline one at once, the model's as a job.

Every answered turn updates it, whichever node wrote the answer. `response_synth` plans it with its own params
(`llm_summary`, `summary_when`, `summary_timeout`, `summary_slot_wait`); when no node did (a workflow without
`response_synth`, or a turn answered from the semantic cache or by a curated answer), the run plans it with the
defaults (`rag.runtime.PipelineRun`), so a published workflow never silently stops summarising. Either way the
run's outcome carries both (`rag.outcome.PipelineOutcome.summary`, `.summary_job`).

The job is run by whoever stores the conversation (the chat, after the terminal event: `chatbot.summaries`). Its
model call takes a slot at the lowest priority (never ahead of an answer), is skipped past `slot_wait`, and has
`timeout` once it holds the slot; a failed call keeps the offline summary. It is asked for only once the
conversation outgrows the history the next turn's prompt carries word for word (`WINDOW_FULL`), or after every
turn (`EVERY_TURN`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rag.deps import PromptProvider
from rag.llm.policy import SlotTerms
from rag.prompting import calls
from rag.prompting.prompts import CONVERSATION_SUMMARIZER
from rag.rules import answers
from rag.state import PipelineState
from rag.stats import AnswerStats
from rag.values import Turn

SUMMARY_NODE = "conversation_summarizer"  # the label of the summary call (LLM_NODE_MODELS can target it)
# When the model writes the running summary: only once a turn leaves the history window, or after every turn.
WINDOW_FULL = "window_full"
EVERY_TURN = "every_turn"
_SUMMARY_MAX_CHARS = 1000
_SUMMARY_ANSWER_CHARS = 3000

SummaryJob = Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class SummaryPolicy:
    """When and how the model writes the summary; the defaults are `response_synth`'s params' defaults."""

    llm_summary: bool = True
    when: str = WINDOW_FULL
    timeout: float = 10.0
    slot_wait: float = 30.0
    # the history the next turn's prompt carries word for word: `history_turns` messages of `history_chars` at most
    history_turns: int = 4
    history_chars: int = 1500


@dataclass(frozen=True, slots=True)
class AnsweredTurn:
    """What a summary of one turn is made from, copied from the run's state when the turn is answered."""

    backend: str
    previous: str  # the summary before this turn
    question: str  # normalised
    answer: str
    history: tuple[Turn, ...]  # the turns before this one
    degraded: bool

    @classmethod
    def of(cls, state: PipelineState) -> AnsweredTurn:
        return cls(
            backend=state.backend,
            previous=state.summary,
            question=state.normalized_question or state.question,
            answer=state.answer,
            history=tuple(state.history),
            degraded=state.degraded,
        )


@dataclass(frozen=True, slots=True)
class PlannedSummary:
    offline: str  # stored with the exchange
    job: SummaryJob | None  # the model's, to be run after the terminal event; None when the offline one stands


class ConversationSummarizer:
    def __init__(
        self,
        *,
        llm: Any = None,
        prompts: PromptProvider | None = None,
        stats: AnswerStats | None = None,
        policy: SummaryPolicy | None = None,
    ) -> None:
        self._llm = llm
        self._prompts = calls.prompt_provider(prompts)
        self._stats = stats or AnswerStats()
        self.policy = policy or SummaryPolicy()
        # After the answer: the lowest priority (never ahead of a request's call), skipped past its wait bound.
        self._slot = SlotTerms(wait=self.policy.slot_wait, low_priority=True, auxiliary="summary")

    def plan(self, turn: AnsweredTurn) -> PlannedSummary:
        """The offline summary, and the model's job when the model is to write one now."""
        offline = answers.updated_summary(turn.previous, turn.question, turn.answer)
        policy = self.policy
        # not when degraded: the model just failed, and the summary would wait for it again
        if self._llm is None or not policy.llm_summary or not turn.answer.strip() or turn.degraded:
            return PlannedSummary(offline, None)
        if policy.when == WINDOW_FULL and self._next_turn_sees_it_all(turn):
            return PlannedSummary(offline, None)
        return PlannedSummary(offline, lambda: self.summarize(turn, offline))

    def _next_turn_sees_it_all(self, turn: AnsweredTurn) -> bool:
        """True while the next turn's prompt will carry every turn so far word for word: the previous ones and this
        one fit the history window (`history_turns` messages, none clipped at `history_chars`), so a model summary
        would only repeat them. The offline summary is still stored, and the model's is written from the turn
        whose answer pushes the first message out, built on the offline one of the turns before."""
        turns = len(calls.recent_turns(list(turn.history), turns=len(turn.history))) + 2
        longest = max(len(turn.question.strip()), len(turn.answer.strip()))
        return turns <= self.policy.history_turns and longest <= self.policy.history_chars

    async def summarize(self, turn: AnsweredTurn, offline: str) -> str:
        """The model's running summary, or `offline` when the call fails, takes over `timeout` seconds once it holds
        a slot, or gets no slot within `slot_wait` (skipped, counted by the concurrency manager). Runs after the
        terminal event at the lowest priority: nothing is emitted, the outcome is counted (`AnswerStats`) and
        logged."""
        llm = self._llm
        assert llm is not None
        try:
            snapshot = await calls.load_prompt(self._prompts, CONVERSATION_SUMMARIZER)
            prompt = calls.render(
                snapshot,
                CONVERSATION_SUMMARIZER,
                summary=turn.previous,
                question=turn.question,
                answer=calls.clip(answers.answer_body(turn.answer), _SUMMARY_ANSWER_CHARS),
            )
            result = await llm.complete(
                backend=turn.backend,
                node=SUMMARY_NODE,
                messages=[{"role": "user", "content": prompt}],
                total_timeout=self.policy.timeout,
                slot=self._slot,
                **calls.call_options(llm, snapshot, node=SUMMARY_NODE),
            )
        except calls.FALLBACK_ERRORS as exc:
            calls.log_fallback("conversation summary", exc)
            self._stats.summary(fallback=True)
            return offline
        summary = " ".join(result.text.split())[:_SUMMARY_MAX_CHARS]
        self._stats.summary(fallback=not summary)
        return summary or offline
