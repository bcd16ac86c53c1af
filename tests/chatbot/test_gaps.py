"""Content gaps: refused, weakly supported and disliked questions grouped into topics, incrementally, served as
JSON at `GET /api/v1/admin/insights/gaps` (admin-read)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from chatbot.apikeys.services import api_key_create
from chatbot.gaps import gap_topics_mark_handled, gaps_report, gaps_update
from chatbot.models import Conversation, Feedback, GapTopic, Message
from chatbot.streaming import pending_records
from rag.retrieval.embedding import LexicalEmbedder
from tests.chatbot.helpers import ask_body, sse_request

pytestmark = pytest.mark.django_db(transaction=True)

STREAM_CHAT = "/api/v1/rag/ask/stream_chat"
GAPS = "/api/v1/admin/insights/gaps"
UNANSWERABLE = (
    "Can I bring my dog to the exam centre?",
    "Can I bring my dog into the exam centre?",
    "can i bring a dog to the exam centre",
    "考場可以帶狗嗎？",
    "考場可以帶狗進去嗎？",
    "Is there a vegetarian lunch at the workshop?",
    "is there vegetarian lunch at the workshop",
    "工作坊有素食午餐嗎？",
    "工作坊有沒有素食午餐？",
    "工作坊的午餐有素食嗎？",
)
EMBEDDER = LexicalEmbedder(dim=256)


def _update() -> int:
    return gaps_update(embed=EMBEDDER.embed_documents, dim=EMBEDDER.dim)


def _logged(question: str, *, outcome: str = "refused", language: str = "en", **fields: Any) -> Message:
    conversation = Conversation.objects.create(client_id="anon:x", title=question[:50])
    request_id = uuid.uuid4().hex
    Message.objects.create(conversation=conversation, role="user", content=question, request_id=request_id)
    return Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="-",
        request_id=request_id,
        outcome=outcome,
        language=language,
        **fields,
    )


async def test_ten_unanswerable_questions_over_sse_appear_in_the_gaps_json_as_fewer_topics() -> None:
    for question in UNANSWERABLE:
        summary = (await sse_request(STREAM_CHAT, ask_body(question))).events()[-1]
        assert summary["outcome"] == "refused", (question, summary)
    await pending_records()
    key = await sync_to_async(api_key_create)(name="reports", scopes=["admin-read"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key.secret}")

    response = await sync_to_async(client.get)(GAPS)

    assert response.status_code == 200, response.content
    topics = response.json()["topics"]
    assert sum(topic["count"] for topic in topics) == 10
    assert 2 <= len(topics) <= 4, [t["examples"] for t in topics]
    for topic in topics:
        assert topic["count"] >= 2 and topic["reasons"]["refused"] == topic["count"]
        assert len(topic["examples"]) == topic["count"] and sum(topic["languages"].values()) == topic["count"]
        assert topic["trend"]["last_7_days"] == topic["count"]
    # asking again takes in only what is new
    assert (await sync_to_async(client.get)(GAPS)).json()["topics"] == topics


def test_the_gaps_json_takes_the_admin_read_scope() -> None:
    key = api_key_create(name="chat only", scopes=["chat"])
    refused = Client(HTTP_AUTHORIZATION=f"Bearer {key.secret}").get(GAPS)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert Client().get(GAPS).status_code == 403


def test_the_concept_lexicon_groups_questions_across_languages() -> None:
    _logged("How do I print my certificate on the moon?")
    _logged("如何在月球上列印證書？", language="zh-hant")
    assert _update() == 2
    [topic] = gaps_report()
    assert topic["count"] == 2 and topic["languages"] == {"en": 1, "zh-hant": 1}


def test_updates_are_incremental_and_take_weak_answers_and_thumbs_down_in() -> None:
    _logged("Can I bring my dog to the exam centre?")
    answered = _logged("Can I bring my dog into the exam centre?", outcome="answered")
    _logged("can i bring a dog to the exam centre", outcome="answered", weak_support=True)
    _logged("Background title task", background=True)
    assert _update() == 2
    assert _update() == 0  # nothing new
    Feedback.objects.create(message=answered, request_id=answered.request_id, kind="thumbs", score=0, client_id="c")
    assert _update() == 1
    [topic] = gaps_report()
    assert topic["count"] == 3 and topic["reasons"] == {"refused": 1, "weak": 1, "disliked": 1}
    assert topic["impact"] == 4  # a thumbs down counts twice
    assert Message.objects.filter(gap_topic__isnull=False).count() == 3


def test_a_handled_topic_leaves_the_report_and_new_questions_open_another() -> None:
    _logged("Is there a vegetarian lunch at the workshop?")
    _update()
    [topic] = GapTopic.objects.all()
    assert gap_topics_mark_handled(ids=[topic.pk], handled_by="staff") == 1
    assert gaps_report() == []
    _logged("is there vegetarian lunch at the workshop")
    _update()
    assert [t["count"] for t in gaps_report()] == [1] and len(gaps_report(include_handled=True)) == 2
