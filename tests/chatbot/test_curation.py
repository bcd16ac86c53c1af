"""A logged answer approved as a curated answer in one click (the Messages admin's action)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from chatbot.models import Conversation, Message
from rag.curated.models import CuratedAnswer

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_messages_action_approves_the_answer_for_its_question() -> None:
    conversation = Conversation.objects.create(client_id="anon:x", title="t")
    Message.objects.create(conversation=conversation, role="user", content="How do I enrol?", request_id="r1")
    answer = Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="Open the course page and press Enrol [1].\n\nSources:\n[1] Enrolment (https://help.example/enrol)",
        request_id="r1",
        language="en",
        sources=[{"ref": 1, "doc_id": "d", "title": "Enrolment", "url": "https://help.example/enrol"}],
    )
    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)

    response = client.post(
        "/admin/chatbot/message/", {"action": "approve_as_curated", "_selected_action": [answer.pk]}, follow=True
    )

    assert response.status_code == 200
    curated = CuratedAnswer.objects.get()
    assert curated.question == "How do I enrol?" and curated.language == "en"
    assert curated.answer == "Open the course page and press Enrol [1]."
    assert curated.source_url == "https://help.example/enrol" and curated.from_request_id == "r1"
    assert curated.approved_by == "staff"
