"""A curated answer added with `manage.py curated add` is what a paraphrase of its question gets over SSE, marked
curated, recorded as such, with its source link."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command

from chatbot.models import Conversation, Message
from chatbot.streaming import pending_records
from rag.curated.models import CuratedAnswer
from tests.chatbot.helpers import ask_body, sse_request

pytestmark = pytest.mark.django_db(transaction=True)

STREAM_CHAT = "/api/v1/rag/ask/stream_chat"
ANSWER = "Write to the exam office; it approves calculators case by case."


async def test_a_paraphrase_gets_the_curated_answer_marked_curated() -> None:
    await sync_to_async(call_command)(
        "curated",
        "add",
        "--question",
        "Can I bring a calculator to the exam?",
        "--answer",
        ANSWER,
        "--language",
        "en",
        "--url",
        "https://help.example/exams",
    )
    response = await sse_request(STREAM_CHAT, ask_body("can i bring a calculator to the exam"))
    events = response.events()
    summary = events[-1]

    assert summary["channel"] == "meta_summary"
    assert summary["curated"] is True and summary["cached"] is False and summary["outcome"] == "curated"
    answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
    assert answer.startswith(ANSWER) and "https://help.example/exams" in answer
    assert summary["sources"][0]["url"] == "https://help.example/exams"
    await pending_records()
    message = await Message.objects.aget(request_id=summary["request_id"], role="assistant")
    curated = await CuratedAnswer.objects.aget()
    assert message.outcome == "curated" and message.curated_id == str(curated.pk)
    # the turn is in the conversation's running summary, as a generated answer's would be (the next turn plans with it)
    conversation = await Conversation.objects.aget(pk=summary["conversation_id"])
    assert conversation.summary.startswith("Q: can i bring a calculator to the exam A: Write to the exam office")

    # another question is not given it
    other = (await sse_request(STREAM_CHAT, ask_body("How do I reset my password?"))).events()[-1]
    assert other["curated"] is False and other["outcome"] != "curated"
