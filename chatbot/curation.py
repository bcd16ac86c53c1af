"""Logged answers made curated answers: the staff's one click on a good answer in the Messages admin."""

from __future__ import annotations

from collections.abc import Iterable

from chatbot.models import Message
from rag.curated.services import curated_answer_create
from rag.rules.answers import answer_body


def message_answers_approve(*, messages: Iterable[Message], approved_by: str) -> int:
    """A curated answer for each answered assistant message: its question, its text without the sources block,
    its first source's link. Messages that are not successful answers are skipped; how many were approved."""
    answers = [m for m in messages if m.role == Message.Role.ASSISTANT and m.status == Message.Status.OK]
    questions = dict(
        Message.objects.filter(request_id__in=[m.request_id for m in answers], role=Message.Role.USER).values_list(
            "request_id", "content"
        )
    )
    approved = 0
    for message in answers:
        question = questions.get(message.request_id, "")
        body = answer_body(message.content).strip()
        if not question.strip() or not body:
            continue
        first = next((s for s in message.sources if isinstance(s, dict) and s.get("url")), None)
        url = str(first["url"]) if first and str(first["url"]).startswith(("http://", "https://")) else ""
        curated_answer_create(
            question=question,
            answer=body,
            language=message.language if message.language in ("zh-hant", "zh-hans", "en") else "zh-hant",
            url=url,
            title=str(first.get("title", "")) if first and url else "",
            from_request_id=message.request_id,
            approved_by=approved_by,
        )
        approved += 1
    return approved
