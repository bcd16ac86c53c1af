"""Writes and reads of conversations: plain functions with keyword-only arguments (sync; call via a thread)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from chatbot.models import Conversation, Message
from rag.outcome import PipelineOutcome
from rag.values import Turn

HISTORY_TURNS = 10


class UnknownConversation(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class ConversationContext:
    conversation_id: str
    exists: bool
    history: tuple[Turn, ...]
    summary: str


def conversation_context_get(*, conversation_id: str | None, client_id: str) -> ConversationContext:
    """History for a new request: one query for the conversation, one for its last turns.

    A missing or empty id means a new conversation (nothing is written until the answer is recorded). An id
    that does not exist, or belongs to another client, is refused the same way so ids cannot be probed.
    """
    if not conversation_id:
        return ConversationContext(conversation_id=str(uuid.uuid4()), exists=False, history=(), summary="")
    try:
        parsed = uuid.UUID(conversation_id)
    except (ValueError, AttributeError, TypeError):
        raise UnknownConversation(f"unknown conversation_id {conversation_id!r}") from None
    conversation = (
        Conversation.objects.filter(pk=parsed, client_id=client_id, hidden_at__isnull=True)
        .only("id", "summary")
        .first()
    )
    if conversation is None:
        raise UnknownConversation(f"unknown conversation_id {conversation_id!r}")
    recent = list(
        Message.objects.filter(conversation=conversation, status=Message.Status.OK)
        .order_by("-created_at", "-id")
        .values_list("role", "content")[: HISTORY_TURNS * 2]
    )
    history = tuple(Turn(role=role, content=content) for role, content in reversed(recent))
    return ConversationContext(str(conversation.pk), exists=True, history=history, summary=conversation.summary)


def exchange_record(
    *,
    conversation_id: str,
    client_id: str,
    question: str,
    answer: str,
    request_id: str,
    status: str,
    outcome: PipelineOutcome | None = None,
    background: bool = False,
) -> Message:
    """Store one question and its answer (or the part of it that was streamed) in one transaction, with what the
    run's `outcome` says of it (none: a bare record, nothing known of the run); an answered outcome's summary
    becomes the conversation's. `background`: a client's background task, recorded but not counted as a question.

    It runs before every answer's terminal event, so it makes as few statements as it can: both messages in one
    insert, and no update of a conversation it has just created (its `updated_at` is new already)."""
    with transaction.atomic():
        conversation, created = Conversation.objects.get_or_create(
            pk=uuid.UUID(conversation_id), defaults={"client_id": client_id, "title": question[:200]}
        )
        if not created and conversation.client_id != client_id:
            raise UnknownConversation(f"unknown conversation_id {conversation_id!r}")
        asked = Message(
            conversation=conversation,
            role=Message.Role.USER,
            content=question,
            request_id=request_id,
            background=background,
        )
        message = Message(
            conversation=conversation,
            role=Message.Role.ASSISTANT,
            content=answer,
            request_id=request_id,
            status=status,
            background=background,
        )
        if outcome is not None:
            _outcome_set(message, outcome)
        Message.objects.bulk_create([asked, message])
        fields = ["updated_at"]
        new_summary = outcome.summary if outcome is not None and status == Message.Status.OK else ""
        if new_summary:
            conversation.summary = new_summary
            fields.append("summary")
        if not created or new_summary:
            conversation.save(update_fields=fields)
    return message


def _outcome_set(message: Message, outcome: PipelineOutcome) -> None:
    """Record on the assistant's message what the run said of its answer."""
    message.error_code = outcome.error_code
    message.backend = outcome.backend
    message.language = outcome.language
    message.intent = outcome.intent
    message.sources = [source.as_dict() for source in outcome.sources]
    message.usage = dict(outcome.usage)
    message.trace_id = outcome.trace_id
    message.trace_exported = outcome.trace_exported
    message.latency_ms = int(outcome.elapsed_ms)
    message.degraded = outcome.degraded
    message.outcome = outcome.outcome
    message.best_score = outcome.best_score
    message.weak_support = outcome.weak_support
    message.closest = [article.as_dict() for article in outcome.closest]
    message.curated_id = outcome.curated_id


def conversation_summary_set(*, conversation_id: str, request_id: str, summary: str) -> bool:
    """Store the running summary written after request `request_id`'s answer, unless a later exchange of the
    conversation was recorded meanwhile (its own summary follows). True when stored."""
    with transaction.atomic():
        latest = (
            Message.objects.filter(conversation_id=uuid.UUID(conversation_id), role=Message.Role.ASSISTANT)
            .order_by("-created_at", "-pk")
            .values_list("request_id", flat=True)
            .first()
        )
        if latest != request_id:
            return False
        return Conversation.objects.filter(pk=uuid.UUID(conversation_id)).update(summary=summary) == 1


TITLE_MAX_CHARS = 200


def conversation_rename(*, conversation_id: uuid.UUID, client_id: str, title: str) -> bool:
    """Give one of the client's conversations a new title; False when it has none by that id.

    An update of the title alone: the conversation keeps its place in the list (`updated_at` is not touched).
    """
    updated = Conversation.objects.filter(pk=conversation_id, client_id=client_id, hidden_at__isnull=True).update(
        title=title
    )
    return updated == 1


def conversation_delete(*, conversation_id: uuid.UUID, client_id: str) -> bool:
    """The visitor deletes one of their conversations: it is gone for them at once (listed nowhere, not to be
    continued), while staff keep it, with its messages and feedback, for CONVERSATION_RETENTION_DAYS
    (chatbot.retention purges it then). False when the client has no such conversation."""
    hidden = Conversation.objects.filter(pk=conversation_id, client_id=client_id, hidden_at__isnull=True).update(
        hidden_at=timezone.now()
    )
    return hidden == 1
