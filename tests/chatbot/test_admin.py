"""The conversation and message admin pages render and are read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from chatbot.models import Conversation, Message
from rag.workflows.models import PublishTest

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


def _answered(conversation: Conversation, request_id: str, question: str, **answer: Any) -> Message:
    Message.objects.create(conversation=conversation, role="user", content=question, request_id=request_id)
    fields: dict[str, Any] = {"content": "Press Forgot password [1].", "outcome": "answered", "language": "en"}
    return Message.objects.create(
        conversation=conversation, role="assistant", request_id=request_id, **(fields | answer)
    )


def test_good_answers_are_added_to_the_publish_test_set_once(admin_client: Client) -> None:
    conversation = Conversation.objects.create(client_id="anon:t", title="t")
    source = {"ref": 1, "doc_id": "en-password-reset", "title": "Reset", "url": "https://help.example/reset"}
    good = _answered(conversation, "r1", "How do I reset my password?", sources=[source, source])
    linked = _answered(conversation, "r2", "Where is the form?", sources=[{"ref": 1, "url": "https://help.example/f"}])
    refused = _answered(conversation, "r3", "What is the meaning of life?", outcome="refused", sources=[source])
    uncited = _answered(conversation, "r4", "Hello?", sources=[])
    selected = [good.pk, linked.pk, refused.pk, uncited.pk, good.pk - 1]  # and a question's own message

    response = admin_client.post(
        "/admin/chatbot/message/", {"action": "add_to_publish_tests", "_selected_action": selected}, follow=True
    )

    assert response.status_code == 200
    assert "2 question(s) added to the publish test set, 3 skipped" in response.content.decode()
    tests = {t.question: t for t in PublishTest.objects.all()}
    assert set(tests) == {"How do I reset my password?", "Where is the form?"}
    reset = tests["How do I reset my password?"]
    assert (reset.must_cite, reset.must_contain, reset.origin) == (["en-password-reset"], [], "request r1")
    assert tests["Where is the form?"].must_cite == ["https://help.example/f"]

    # the same question asked again (other spacing and case) is not added twice
    again = _answered(conversation, "r5", "how do I reset my  password?", sources=[source])
    admin_client.post("/admin/chatbot/message/", {"action": "add_to_publish_tests", "_selected_action": [again.pk]})
    assert PublishTest.objects.count() == 2


def test_the_action_needs_the_right_to_add_publish_tests(django_user_model: Any, conversation: Conversation) -> None:
    reader = django_user_model.objects.create_user("reader", password="pw-reader-123", is_staff=True)
    reader.user_permissions.add(Permission.objects.get(codename="view_message"))
    client = Client()
    client.force_login(reader)
    assert "add_to_publish_tests" not in client.get("/admin/chatbot/message/").content.decode()
    reader.user_permissions.add(Permission.objects.get(codename="add_publishtest"))
    assert "add_to_publish_tests" in client.get("/admin/chatbot/message/").content.decode()
