"""Insights: the summary's counts match the questions asked; CSV cells are guarded; the admin page renders."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client

from chatbot.apikeys.services import api_key_create
from chatbot.gaps import gaps_update
from chatbot.insights import csv_cell
from chatbot.models import Feedback, Message
from chatbot.streaming import pending_records
from rag.retrieval.embedding import LexicalEmbedder
from tests.chatbot.helpers import ask_body, sse_request

pytestmark = pytest.mark.django_db(transaction=True)

STREAM_CHAT = "/api/v1/rag/ask/stream_chat"
SUMMARY = "/api/v1/admin/insights/summary"


async def test_the_summary_counts_the_questions_asked() -> None:
    asked = {
        "How do I reset my password?": "answered",
        "如何重設密碼？": "answered",
        "Can I bring my dog to the exam centre?": "refused",
        "Tell me a joke": "out_of_scope",
    }
    for question, outcome in asked.items():
        summary = (await sse_request(STREAM_CHAT, ask_body(question))).events()[-1]
        assert summary["outcome"] == outcome
    await pending_records()
    answer = await Message.objects.filter(role="assistant", outcome="answered").afirst()
    assert answer is not None
    await Feedback.objects.acreate(message=answer, request_id=answer.request_id, kind="thumbs", score=1, client_id="c")
    key = await sync_to_async(api_key_create)(name="reports", scopes=["admin-read"])

    response = await sync_to_async(Client(HTTP_AUTHORIZATION=f"Bearer {key.secret}").get)(SUMMARY, {"days": "7"})

    assert response.status_code == 200, response.content
    figures = response.json()
    assert figures["questions"] == 4 and figures["answered"] == 2 and figures["answered_rate"] == 0.5
    assert figures["outcomes"]["refused"] == 1 and figures["outcomes"]["out_of_scope"] == 1
    assert figures["satisfaction"] == {"thumbs_up": 1, "thumbs_down": 0, "rate": 1.0}
    assert sum(day["questions"] for day in figures["per_day"]) == 4 and len(figures["per_day"]) == 7
    assert figures["languages"] == {"en": 3, "zh-hant": 1}
    assert figures["latency_ms"]["p50"] is not None and figures["latency_ms"]["p95"] >= figures["latency_ms"]["p50"]
    assert figures["top_gap_topics"][0]["count"] == 1


def test_background_tasks_are_not_questions_and_bad_days_are_refused() -> None:
    from chatbot.models import Conversation

    conversation = Conversation.objects.create(client_id="c")
    Message.objects.create(conversation=conversation, role="assistant", request_id="r", outcome="answered")
    Message.objects.create(
        conversation=conversation, role="assistant", request_id="t", outcome="answered", background=True
    )
    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.get(SUMMARY).json()["questions"] == 1
    refused = client.get(SUMMARY, {"days": "0"})
    assert refused.status_code == 400 and "'days'" in refused.json()["error"]["message"]


def test_csv_cells_that_look_like_formulas_are_made_text() -> None:
    assert [csv_cell(v) for v in ("=1+1", "+33", "-2", "@SUM(A1)", "\tx", "plain", 3, None)] == [
        "'=1+1",
        "'+33",
        "'-2",
        "'@SUM(A1)",
        "'\tx",
        "plain",
        "3",
        "",
    ]


def test_the_admin_insights_page_draws_its_chart_and_exports_guarded_csv() -> None:
    from chatbot.models import Conversation

    conversation = Conversation.objects.create(client_id="c")
    Message.objects.create(conversation=conversation, role="user", request_id="r", content="=HYPERLINK(1)")
    Message.objects.create(
        conversation=conversation, role="assistant", request_id="r", outcome="refused", language="=cmd", latency_ms=9
    )
    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)

    gaps_update(embed=LexicalEmbedder(dim=64).embed_documents, dim=64)
    page = client.get("/admin/chatbot/gaptopic/insights/", {"days": "7"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "<svg" in html and html.count("<rect") == 14  # two bars a day
    assert "https://" not in html.split("<svg", 1)[1].split("</svg>", 1)[0]  # nothing fetched from elsewhere

    exported = client.get("/admin/chatbot/gaptopic/insights.csv", {"days": "7"})
    text = exported.content.decode("utf-8-sig")
    assert exported["Content-Type"].startswith("text/csv")
    assert "\r\n'=cmd,1\r\n" in text and "\r\n'=HYPERLINK(1),1\r\n" in text

    listed = client.get("/admin/chatbot/gaptopic/")
    assert listed.status_code == 200 and "/admin/rag_curated/curatedanswer/add/?question=" in listed.content.decode()
    assert "/admin/chatbot/gaptopic/insights/" in listed.content.decode()
