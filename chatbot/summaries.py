"""The conversation summary, written after the answer's terminal event.

A run's outcome carries the model's summary as a job (`rag.outcome.PipelineOutcome.summary_job`, planned on every
answered turn whichever nodes the workflow has: `rag.conversation_summary`); the exchange is recorded with the
offline summary at once and this module runs the job in a task of its own, so the client's stream ends as soon as
the answer does and a client going away does not stop it. The job's model call takes an LLM slot at the lowest
priority (it never goes ahead of an answer), waits for it at most `summary_slot_wait` (past it the call is skipped,
counted in the concurrency console, and the offline summary kept), then has `summary_timeout` from when it holds
the slot; the whole write is bounded by `SUMMARY_WRITE_BOUND`, above the default wait plus timeout. The
summary is stored by the recording thread (`chatbot.recording`), on its kept connection, after the exchange. The next
turn of the same conversation waits for a summary still being written (at most `SUMMARY_BEFORE_NEXT_TURN_WAIT`),
so it plans with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from chatbot.recording import exchange_recorder, failure_words
from chatbot.services import conversation_summary_set

logger = logging.getLogger(__name__)

SUMMARY_WRITE_BOUND = 60.0
SUMMARY_BEFORE_NEXT_TURN_WAIT = 10.0
_pending: dict[str, asyncio.Task[None]] = {}


def summary_write_later(
    conversation_id: str, request_id: str, job: Callable[[], Awaitable[str]], recorded: asyncio.Task[Any]
) -> asyncio.Task[None]:
    """Run `job` and store its summary once the exchange (`recorded`) is written."""
    task = asyncio.create_task(_write(conversation_id, request_id, job, recorded), name=f"summary-{request_id}")
    _pending[conversation_id] = task
    task.add_done_callback(lambda done: _finished(conversation_id, done))
    return task


async def _write(
    conversation_id: str, request_id: str, job: Callable[[], Awaitable[str]], recorded: asyncio.Task[Any]
) -> None:
    async with asyncio.timeout(SUMMARY_WRITE_BOUND):
        summary = await job()
        await asyncio.wait({recorded})
        if recorded.cancelled() or recorded.exception() is not None or not summary:
            return  # the exchange was not written, or may not have been: no conversation is known to hold it
        stored = await exchange_recorder().run(
            conversation_summary_set, conversation_id=conversation_id, request_id=request_id, summary=summary
        )
        if not stored:
            logger.info("summary of %s not stored: a later exchange of the conversation came first", request_id)


def _finished(conversation_id: str, task: asyncio.Task[None]) -> None:
    if _pending.get(conversation_id) is task:
        del _pending[conversation_id]
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.error("writing the conversation summary %s: %r", failure_words(exc), exc)


async def summary_settled(conversation_id: str, max_wait: float = SUMMARY_BEFORE_NEXT_TURN_WAIT) -> None:
    """Wait (bounded) for the summary of the conversation's previous turn when it is still being written here."""
    task = _pending.get(conversation_id)
    if task is not None:
        await asyncio.wait({task}, timeout=max_wait)


async def pending_summaries(max_wait: float = SUMMARY_WRITE_BOUND) -> None:
    """Wait for summaries still being written (tests, shutdown)."""
    if _pending:
        await asyncio.wait(set(_pending.values()), timeout=max_wait)
