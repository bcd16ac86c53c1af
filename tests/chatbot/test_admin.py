"""The conversation and message admin pages render and are read-only."""

from __future__ import annotations

import pytest
from django.test import Client

from chatbot.models import Conversation, Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation() -> Conversation:
    conversation = Conversation.objects.create(client_id="anon:abc", title="如何重設密碼？")
    Message.objects.create(conversation=conversation, role="user", content="如何重設密碼？", request_id="r1")
    Message.objects.create(
        conversation=conversation, role="assistant", content="請到登入頁…", request_id="r1", intent="simple_faq"
    )
    return conversation


def test_changelists_and_search_render(admin_client: Client, conversation: Conversation) -> None:
    assert admin_client.get("/admin/chatbot/conversation/").status_code == 200
    assert admin_client.get("/admin/chatbot/conversation/", {"q": "abc"}).status_code == 200
    assert admin_client.get("/admin/chatbot/message/", {"status__exact": "ok", "q": "密碼"}).status_code == 200


def test_a_conversation_shows_its_messages_read_only(admin_client: Client, conversation: Conversation) -> None:
    response = admin_client.get(f"/admin/chatbot/conversation/{conversation.pk}/change/")
    assert response.status_code == 200
    assert "請到登入頁" in response.content.decode()
    assert admin_client.get("/admin/chatbot/message/add/").status_code == 403
    assert admin_client.post(f"/admin/chatbot/conversation/{conversation.pk}/change/", {}).status_code == 403


def test_a_message_shows_whether_its_trace_was_exported(admin_client: Client, conversation: Conversation) -> None:
    answer = conversation.messages.get(role="assistant")
    page = admin_client.get(f"/admin/chatbot/message/{answer.pk}/change/").content.decode()
    assert "Trace exported" in page  # staff can tell why feedback on it re-sent the trace
