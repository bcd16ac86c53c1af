"""Every answer's outcome is recorded on its message, from the run's typed outcome: answered, refused, out of
scope, with the best retrieval score and the articles retrieval came closest to."""

from __future__ import annotations

import pytest

from chatbot.models import Message
from chatbot.streaming import pending_records
from tests.chatbot.helpers import ask_body, sse_request

pytestmark = pytest.mark.django_db(transaction=True)

STREAM_CHAT = "/api/v1/rag/ask/stream_chat"


async def _asked(question: str) -> tuple[dict, Message]:
    response = await sse_request(STREAM_CHAT, ask_body(question))
    summary = response.events()[-1]
    assert summary["channel"] == "meta_summary"
    await pending_records()
    message = await Message.objects.aget(request_id=summary["request_id"], role="assistant")
    return summary, message


async def test_an_answer_from_the_content_is_recorded_as_answered_with_its_score() -> None:
    summary, message = await _asked("How do I reset my password?")

    assert summary["outcome"] == message.outcome == "answered"
    assert summary["curated"] is False and summary["cached"] is False
    assert message.best_score is not None and message.best_score == pytest.approx(summary["best_score"], abs=1e-3)
    assert message.sources and message.closest
    assert {"doc_id", "title", "url", "score"} <= set(message.closest[0])
    assert not message.weak_support


async def test_a_question_the_content_cannot_answer_is_recorded_as_refused() -> None:
    summary, message = await _asked("Can I bring my pet iguana to the volcano observatory?")

    assert summary["outcome"] == message.outcome == "refused"
    # the question's own message carries no outcome: only answers do
    asked = await Message.objects.aget(request_id=message.request_id, role="user")
    assert asked.outcome == ""


async def test_an_out_of_scope_question_is_recorded_as_out_of_scope() -> None:
    summary, message = await _asked("Tell me a joke")

    assert summary["outcome"] == message.outcome == "out_of_scope"
    assert message.best_score is None  # no search ran
