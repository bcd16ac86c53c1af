"""The conversation and message admin pages render and are read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chatbot.models import Conversation, Message

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    """The admin speaks the browser's language, zh-hant when it names none: these tests read it in English."""
    settings.LANGUAGE_CODE = "en"


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


def test_wrong_admin_passwords_lock_the_username_out_of_that_address(django_user_model) -> None:
    django_user_model.objects.create_user("ops", password="right-pass-123", is_staff=True, is_superuser=True)
    attacker, colleague = Client(REMOTE_ADDR="203.0.113.9"), Client(REMOTE_ADDR="198.51.100.7")

    def login(client: Client, password: str) -> int:
        form = {"username": "ops", "password": password, "next": "/admin/"}
        return client.post("/admin/login/?next=/admin/", form).status_code

    answers = [login(attacker, f"guess-{n}") for n in range(30)]
    assert answers[:4] == [200] * 4  # the login form again, with its error
    assert set(answers[5:]) == {429}  # locked out after the fifth failure: nothing more is tried
    assert login(attacker, "right-pass-123") == 429
    assert login(colleague, "right-pass-123") == 302  # the same user from elsewhere still gets in
