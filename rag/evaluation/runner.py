"""Ask a SQuAD file's questions through a pipeline runtime and, optionally, have an LLM judge the answers.

The runtime is the product's (the registry, the default workflow, the nodes' dependencies), built by the caller
over a store of the evaluation's own; each question is a fresh request with no history, asked one at a time,
so the latency is one user's. The judge reads the question, the answer and the passages the answer cites, with
the versioned prompt `answer-judge`, and returns 1-5 scores with a reason; a judge call that fails is counted,
not fatal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from rag.deps import PromptProvider
from rag.evaluation.metrics import AnswerRecord
from rag.events import Event
from rag.llm.structured import StructuredOutput
from rag.prompting import calls
from rag.retrieval.loaders import SquadQuestion
from rag.runtime import AskRequest, PipelineRuntime
from rag.state import PipelineState

logger = logging.getLogger(__name__)

JUDGE_PROMPT = "answer-judge"
JUDGE_NODE = "answer_judge"
_PASSAGE_CHARS = 1500


class Judgement(StructuredOutput):
    """The judge's scores of one answer (1 to 5) and why."""

    faithfulness: int = Field(ge=1, le=5)
    relevance: int = Field(ge=1, le=5)
    reason: str = Field(max_length=300)


def cited_passages(state: PipelineState) -> list[str]:
    """The text of every retrieved passage of a document the answer cites."""
    cited = {source.doc_id for source in state.sources if source.doc_id}
    return [chunk.text for chunk in state.retrieved if chunk.doc_id in cited]


async def ask_one(runtime: PipelineRuntime, question: SquadQuestion, *, backend: str = "chat") -> AnswerRecord:
    started = time.perf_counter()
    run = await runtime.start(AskRequest(question=question.text, backend=backend))
    terminal: Event | None = None
    async for event in run.events():
        terminal = event
    latency = (time.perf_counter() - started) * 1000
    error = str(terminal.get("code", "error")) if terminal is not None and terminal["channel"] == "error" else ""
    return AnswerRecord(
        question_id=question.question_id,
        question=question.text,
        answer=run.state.answer,
        golds=question.answers,
        cited_passages=cited_passages(run.state),
        latency_ms=latency,
        error=error,
    )


async def ask_all(
    runtime: PipelineRuntime, questions: Sequence[SquadQuestion], *, backend: str = "chat"
) -> list[AnswerRecord]:
    # the first request builds the graph and warms the thread pool: not a user's latency
    await ask_one(runtime, SquadQuestion("warm-up", "warm-up", "", ()), backend=backend)
    return [await ask_one(runtime, question, backend=backend) for question in questions]


async def judge_prompt_version(prompts: PromptProvider) -> int:
    return int(getattr(await calls.load_prompt(prompts, JUDGE_PROMPT), "version", 0))


async def judge_one(llm: Any, prompts: PromptProvider, record: AnswerRecord, *, backend: str = "chat") -> None:
    """The judge's scores into `record.judge` ({"error": ...} when the call or its output failed, {"skipped": ...}
    for a refusal or an error: nothing to grade)."""
    if record.outcome in ("refused", "error"):
        record.judge = {"skipped": record.outcome}
        return
    try:
        snapshot = await calls.load_prompt(prompts, JUDGE_PROMPT)
        passages = "\n\n".join(
            f"[{i}] {calls.clip(text, _PASSAGE_CHARS)}" for i, text in enumerate(record.cited_passages, 1)
        )
        prompt = calls.render(
            snapshot, JUDGE_PROMPT, question=record.question, answer=record.body, passages=passages or "(none)"
        )
        options = calls.call_options(llm, snapshot, node=JUDGE_NODE)
        result = await llm.complete(
            backend=backend,
            node=JUDGE_NODE,
            messages=[{"role": "user", "content": prompt}],
            output=Judgement,
            schema_name="answer_judgement",
            **options,
        )
    except calls.FALLBACK_ERRORS as exc:
        logger.warning("judge failed for %s: %s", record.question_id, exc)
        record.judge = {"error": calls.fallback_reason(exc)}
        return
    verdict: Judgement = result.parsed
    record.judge = {"faithfulness": verdict.faithfulness, "relevance": verdict.relevance, "reason": verdict.reason}


async def judge_all(llm: Any, prompts: PromptProvider, records: Sequence[AnswerRecord]) -> None:
    for record in records:
        await judge_one(llm, prompts, record)
