"""A conversation its visitor deleted: hidden from them, kept for staff, purged after the retention period."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from chatbot.models import Conversation, Feedback, Message
from chatbot.retention import conversations_purge


def _conversation(client_hex: str, *, hidden_days_ago: float | None) -> Conversation:
    hidden_at = None if hidden_days_ago is None else timezone.now() - timedelta(days=hidden_days_ago)
    conversation = Conversation.objects.create(client_id=f"anon:{client_hex}", title="t", hidden_at=hidden_at)
    message = Message.objects.create(
        conversation=conversation, role="assistant", content="a", request_id=uuid.uuid4().hex
    )
    Feedback.objects.create(message=message, request_id=message.request_id, kind="thumbs", score=0, client_id="x")
    return conversation


@pytest.mark.django_db
def test_a_conversation_deleted_by_its_visitor_is_still_in_the_admin() -> None:
    visitor = Client()
    client_hex = uuid.uuid4().hex
    conversation = _conversation(client_hex, hidden_days_ago=None)
    visitor.cookies["hc_client"] = client_hex
    assert visitor.delete(f"/api/v1/chat/conversations/{conversation.pk}").status_code == 204

    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(staff)
    page = admin.get(f"/admin/chatbot/conversation/{conversation.pk}/change/")
    assert page.status_code == 200
    listed = admin.get("/admin/chatbot/conversation/?hidden_at__isnull=False")
    assert str(conversation.pk) in listed.content.decode()


@pytest.mark.django_db
def test_the_purge_deletes_only_what_visitors_deleted_longer_ago_than_the_retention() -> None:
    old = _conversation(uuid.uuid4().hex, hidden_days_ago=31)
    recent = _conversation(uuid.uuid4().hex, hidden_days_ago=29)
    kept = _conversation(uuid.uuid4().hex, hidden_days_ago=None)

    assert conversations_purge(retention_days=30) == 1
    assert set(Conversation.objects.values_list("pk", flat=True)) == {recent.pk, kept.pk}
    assert not Message.objects.filter(conversation_id=old.pk).exists()
    assert Feedback.objects.count() == 2


@pytest.mark.django_db
def test_the_command_purges_with_the_days_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    _conversation(uuid.uuid4().hex, hidden_days_ago=3)
    call_command("purge_conversations", "--days", "2")
    assert "purged 1 conversation(s)" in capsys.readouterr().out
    assert not Conversation.objects.exists()
