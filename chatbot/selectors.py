"""Reads for the chat page and the API."""

from __future__ import annotations

from typing import Any

from chatbot.models import Conversation, Message


def conversation_list(*, client_id: str, limit: int = 30) -> list[dict[str, Any]]:
    rows = Conversation.objects.filter(client_id=client_id, hidden_at__isnull=True).values("id", "title", "updated_at")[
        :limit
    ]
    return [{"id": str(r["id"]), "title": r["title"], "updated_at": r["updated_at"].isoformat()} for r in rows]


def conversation_messages(*, conversation_id: str, client_id: str) -> list[dict[str, Any]] | None:
    conversation = Conversation.objects.filter(pk=conversation_id, client_id=client_id, hidden_at__isnull=True).first()
    if conversation is None:
        return None
    return [
        {
            "role": m.role,
            "content": m.content,
            "status": m.status,
            "request_id": m.request_id,
            "sources": m.sources,
            "created_at": m.created_at.isoformat(),
        }
        for m in Message.objects.filter(conversation=conversation)
    ]
