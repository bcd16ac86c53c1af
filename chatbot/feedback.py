"""Feedback on answers: check the input, record it (one per answer and client), list it for export, and send it
to Langfuse as a score once the row is committed.

Sending only enqueues (`Telemetry.send_score`): the exporter does the network work. Whether the request's trace
reached the exporter was recorded on the answer when it finished (`Message.trace_exported`); when it did not
(sampled out, or dropped with the queue full), the trace is sent before the score, from the summary its worker
kept or, failing that, from the messages stored here (question, answer length, latency, usage). Nothing is
decided again now: the sample rate may have changed since, and the answer may have come from another worker.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from chatbot.models import Feedback, Message
from rag.telemetry import ScoreRecord, get_telemetry, trace_id_for, trace_summary_from_exchange
from rag.telemetry.record import ScoreDataType

logger = logging.getLogger(__name__)

MAX_COMMENT_CHARS = 2000
MAX_ID_CHARS = 64
THUMBS = {"up": 1, "down": 0}
# Langfuse score names: one per kind, since a score name should keep one data type.
SCORE_NAMES: dict[str, tuple[str, ScoreDataType]] = {
    Feedback.Kind.THUMBS: ("user_feedback", "BOOLEAN"),
    Feedback.Kind.RATING: ("user_rating", "NUMERIC"),
}


class FeedbackInputError(ValueError):
    """Input that cannot be recorded; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class FeedbackTargetNotFound(LookupError):
    """No answer of this client has that request or trace id (someone else's looks the same)."""


@dataclass(frozen=True, slots=True)
class FeedbackInput:
    request_id: str
    trace_id: str
    kind: str
    score: int
    comment: str


def _id_field(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise FeedbackInputError(name, f"'{name}' must be a string, not {type(value).__name__}")
    value = value.strip()
    if len(value) > MAX_ID_CHARS:
        raise FeedbackInputError(name, f"'{name}' is longer than {MAX_ID_CHARS} characters")
    return value


def feedback_input_parse(payload: Any) -> FeedbackInput:
    if not isinstance(payload, dict):
        raise FeedbackInputError("body", "request body must be a JSON object")
    request_id = _id_field(payload, "request_id")
    trace_id = _id_field(payload, "trace_id")
    if not request_id and not trace_id:
        raise FeedbackInputError("request_id", "'request_id' (or 'trace_id') is required")

    score = payload.get("score")
    if isinstance(score, str) and score.strip().lower() in THUMBS:
        kind, value = Feedback.Kind.THUMBS, THUMBS[score.strip().lower()]
    # bool is an int to Python; `true` is not a rating.
    elif isinstance(score, int) and not isinstance(score, bool) and 1 <= score <= 5:
        kind, value = Feedback.Kind.RATING, score
    elif score is None:
        raise FeedbackInputError("score", "'score' is required: 'up', 'down' or an integer from 1 to 5")
    else:
        raise FeedbackInputError("score", f"'score' must be 'up', 'down' or an integer from 1 to 5, not {score!r}")

    comment = payload.get("comment")
    if comment is None:
        comment = ""
    if not isinstance(comment, str):
        raise FeedbackInputError("comment", f"'comment' must be a string, not {type(comment).__name__}")
    comment = comment.strip()
    if len(comment) > MAX_COMMENT_CHARS:
        raise FeedbackInputError(
            "comment", f"'comment' is {len(comment)} characters long; the limit is {MAX_COMMENT_CHARS}"
        )
    return FeedbackInput(request_id=request_id, trace_id=trace_id, kind=kind, score=value, comment=comment)


def _exchange_get(*, client_id: str, request_id: str, trace_id: str) -> tuple[Message, Message | None]:
    """(answer, question) of one of the client's exchanges: one query by request id, two by trace id alone.

    Restricted to the client's conversations in the query itself, so another client's id is simply not found.
    """
    own = Message.objects.filter(conversation__client_id=client_id)
    if not request_id:
        request_id = (
            own.filter(trace_id=trace_id, role=Message.Role.ASSISTANT).values_list("request_id", flat=True).first()
            or ""
        )
        if not request_id:
            raise FeedbackTargetNotFound(f"no answer with trace_id {trace_id!r}")
    answer = question = None
    for message in own.filter(request_id=request_id).select_related("conversation"):
        if message.role == Message.Role.ASSISTANT:
            answer = message
        else:
            question = message
    if answer is None or (trace_id and answer.trace_id and answer.trace_id != trace_id):
        raise FeedbackTargetNotFound(f"no answer with request_id {request_id!r}")
    return answer, question


def feedback_record(*, client_id: str, data: FeedbackInput) -> tuple[Feedback, bool]:
    """Store the client's verdict on an answer, replacing an earlier one; (feedback, created).

    Raises FeedbackTargetNotFound when the id is not one of this client's answers.
    """
    answer, question = _exchange_get(client_id=client_id, request_id=data.request_id, trace_id=data.trace_id)
    # update_or_create is atomic and survives a concurrent first verdict (the unique constraint, then a retry).
    feedback, created = Feedback.objects.update_or_create(
        message=answer,
        client_id=client_id,
        defaults={
            "request_id": answer.request_id,
            # The id any trace of this request has (or will have, if it is created for this score).
            "trace_id": answer.trace_id or trace_id_for(answer.request_id),
            "kind": data.kind,
            "score": data.score,
            "comment": data.comment,
        },
    )
    # Runs at once in autocommit, or after the caller's transaction commits: never for a row rolled back.
    transaction.on_commit(lambda: feedback_send(feedback=feedback, answer=answer, question=question))
    return feedback, created


def feedback_send(*, feedback: Feedback, answer: Message, question: Message | None) -> None:
    """Queue the feedback as a Langfuse score (no-op with telemetry off). Never raises: the verdict is stored."""
    try:
        telemetry = get_telemetry()
        if not telemetry.enabled:
            return
        name, data_type = SCORE_NAMES[Feedback.Kind(feedback.kind)]
        # Stable per answer and client, so a changed verdict overwrites the score in Langfuse.
        score_id = hashlib.sha256(f"feedback:{feedback.trace_id}:{feedback.client_id}".encode()).hexdigest()[:32]
        score = ScoreRecord(
            request_id=feedback.request_id,
            trace_id=feedback.trace_id,
            name=name,
            value=float(feedback.score),
            data_type=data_type,
            score_id=score_id,
            comment=feedback.comment or None,
            metadata={"kind": feedback.kind, "feedback_id": feedback.pk},
        )
        fallback = trace_summary_from_exchange(
            request_id=answer.request_id,
            question=question.content if question is not None else "",
            answer_chars=len(answer.content),
            finished_at=answer.created_at,
            latency_ms=answer.latency_ms,
            usage=answer.usage if isinstance(answer.usage, dict) else None,
            status="ok" if answer.status == Message.Status.OK else (answer.error_code or answer.status),
            backend=answer.backend,
            language=answer.language,
            intent=answer.intent,
            conversation_id=str(answer.conversation_id),
            client_id=feedback.client_id,
        )
        if not telemetry.send_score(score, trace_exported=answer.trace_exported, fallback=fallback):
            logger.warning("feedback %s not sent to Langfuse: the telemetry queue is full", feedback.pk)
    except Exception:
        logger.exception("feedback %s not sent to Langfuse", feedback.pk)


# --- selectors ----------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "created_at",
    "updated_at",
    "kind",
    "score",
    "question",
    "comment",
    "request_id",
    "trace_id",
    "conversation_id",
    "intent",
    "language",
    "answer",
)


def feedback_with_question(queryset: QuerySet[Feedback]) -> QuerySet[Feedback]:
    """The rows with `question`: what the person asked, the answer's user message (same conversation and
    request id), read in the same query as the rows."""
    if "question" in queryset.query.annotations:
        return queryset
    asked = Message.objects.filter(
        conversation_id=OuterRef("message__conversation_id"),
        request_id=OuterRef("message__request_id"),
        role=Message.Role.USER,
    ).values("content")[:1]
    return queryset.annotate(question=Subquery(asked))


def feedback_export_rows(*, queryset: QuerySet[Feedback]) -> Iterator[list[str]]:
    """Rows for a CSV export (header first), one query however many rows; formula-like cells are quoted."""
    yield list(CSV_COLUMNS)
    rows = feedback_with_question(queryset).select_related("message").order_by("-created_at", "-id")
    for feedback in rows.iterator(chunk_size=500):
        message = feedback.message
        yield [
            feedback.created_at.isoformat(),
            feedback.updated_at.isoformat(),
            feedback.kind,
            str(feedback.score),
            csv_cell(getattr(feedback, "question", None) or ""),
            csv_cell(feedback.comment),
            feedback.request_id,
            feedback.trace_id,
            str(message.conversation_id),
            message.intent,
            message.language,
            csv_cell(message.content),
        ]


def csv_cell(value: str) -> str:
    # A cell starting with = + - @ (or a tab/CR that hides one) is a formula to spreadsheets (CSV injection).
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
