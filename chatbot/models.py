"""Conversations and their messages. A request reads its history once and writes its exchange once."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _


class Conversation(models.Model):
    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    # Who may continue it: "user:<pk>" for a signed-in user, "anon:<uuid>" for a browser, "cli" for the terminal.
    client_id = models.CharField(_("client id"), max_length=80, db_index=True)
    title = models.CharField(_("title"), max_length=200, blank=True)
    summary = models.TextField(
        _("summary"), blank=True, help_text=_("Running summary the pipeline keeps for follow-ups.")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # When its visitor deleted it: hidden from the visitor from then on, kept for staff for
    # CONVERSATION_RETENTION_DAYS, then purged (chatbot.retention).
    hidden_at = models.DateTimeField(_("deleted by the visitor at"), null=True, blank=True, db_index=True)

    class Meta:
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["client_id", "-updated_at"])]

    def __str__(self) -> str:
        return self.title or str(self.id)


class GapTopic(models.Model):
    """Questions the content could not answer well (refused, weakly supported, thumbs down), similar ones together
    across languages: what the content team should write next. Kept up to date incrementally (chatbot.gaps)."""

    label = models.CharField(_("topic"), max_length=300, help_text=_("The first question of the topic."))
    count = models.PositiveIntegerField(_("questions"), default=0)
    refused = models.PositiveIntegerField(_("refused"), default=0)
    weak = models.PositiveIntegerField(_("weakly supported"), default=0)
    disliked = models.PositiveIntegerField(_("thumbs down"), default=0)
    languages = models.JSONField(_("languages"), default=dict, blank=True)  # language -> questions
    examples = models.JSONField(_("examples"), default=list, blank=True)  # a few questions as asked
    closest = models.JSONField(_("closest articles"), default=dict, blank=True)  # doc_id -> {title, url, count}
    daily = models.JSONField(_("questions per day"), default=dict, blank=True)  # ISO date -> questions
    concepts = models.JSONField(_("key concepts"), default=list, blank=True)
    centroid = models.BinaryField(_("centroid"), null=True, blank=True)  # float32 mean of the questions' vectors
    first_seen = models.DateTimeField(_("first seen"))
    last_seen = models.DateTimeField(_("last seen"), db_index=True)
    handled_at = models.DateTimeField(_("handled at"), null=True, blank=True, db_index=True)
    handled_by = models.CharField(_("handled by"), max_length=150, blank=True)

    class Meta:
        verbose_name = _("content gap")
        verbose_name_plural = _("content gaps")
        ordering = ["-count", "-last_seen"]

    def __str__(self) -> str:
        return self.label


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", _("user")
        ASSISTANT = "assistant", _("assistant")

    class Status(models.TextChoices):
        OK = "ok", _("ok")
        FAILED = "failed", _("failed")
        CANCELLED = "cancelled", _("cancelled")

    class Outcome(models.TextChoices):
        """What became of the question (rag.outcome.OUTCOMES), for the content team."""

        ANSWERED = "answered", _("answered")
        REFUSED = "refused", _("refused (nothing relevant)")
        OUT_OF_SCOPE = "out_of_scope", _("out of scope")
        DEGRADED = "degraded", _("degraded")
        ERROR = "error", _("error")
        CACHED = "cached", _("from the cache")
        CURATED = "curated", _("curated")

    conversation = models.ForeignKey(
        Conversation, verbose_name=_("conversation"), on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(_("role"), max_length=16, choices=Role.choices)
    content = models.TextField(_("content"), blank=True)
    request_id = models.CharField(_("request id"), max_length=64, db_index=True)
    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.OK)
    error_code = models.CharField(_("error code"), max_length=32, blank=True)
    backend = models.CharField(_("backend"), max_length=16, blank=True)
    language = models.CharField(_("language"), max_length=16, blank=True)
    intent = models.CharField(_("intent"), max_length=32, blank=True)
    sources = models.JSONField(_("sources"), default=list, blank=True)
    usage = models.JSONField(_("usage"), default=dict, blank=True)
    trace_id = models.CharField(_("trace id"), max_length=64, blank=True)
    # Whether the request's trace went to the Langfuse exporter when it finished (sampled and not dropped with
    # the queue full); feedback on an answer without it sends the trace before the score.
    trace_exported = models.BooleanField(_("trace exported"), default=False)
    latency_ms = models.PositiveIntegerField(_("latency ms"), null=True, blank=True)
    # answered from the retrieved passages alone because the answer LLM failed for good
    degraded = models.BooleanField(_("degraded"), default=False)
    # an answer's outcome (blank on the question's own message)
    outcome = models.CharField(_("outcome"), max_length=16, choices=Outcome.choices, blank=True, db_index=True)
    best_score = models.FloatField(_("best retrieval score"), null=True, blank=True)
    weak_support = models.BooleanField(
        _("weakly supported"),
        default=False,
        help_text=_("Answered although retrieval found no passage it judged relevant."),
    )
    # the articles retrieval came closest to: [{doc_id, title, url, score}]
    closest = models.JSONField(_("closest articles"), default=list, blank=True)
    curated_id = models.CharField(_("curated answer"), max_length=64, blank=True)
    # asked by a client's background task (a title, follow-up suggestions...), not by a person: not a question
    background = models.BooleanField(_("background task"), default=False)
    gap_topic = models.ForeignKey(
        GapTopic,
        verbose_name=_("content gap"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="messages",
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["conversation", "created_at"]),
            models.Index(fields=["role", "created_at"], name="message_role_created"),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class Feedback(models.Model):
    """A client's verdict on one answer: thumbs (up=1, down=0) or a 1-5 rating. One per answer and client; a
    second verdict replaces the first."""

    class Kind(models.TextChoices):
        THUMBS = "thumbs", _("thumbs")
        RATING = "rating", _("rating (1-5)")

    message = models.ForeignKey(Message, verbose_name=_("message"), on_delete=models.CASCADE, related_name="feedback")
    request_id = models.CharField(_("request id"), max_length=64, db_index=True)
    trace_id = models.CharField(_("trace id"), max_length=64, blank=True)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices)
    score = models.PositiveSmallIntegerField(_("score"), help_text=_("thumbs: 1 up, 0 down; rating: 1 to 5"))
    comment = models.TextField(_("comment"), blank=True)
    client_id = models.CharField(_("client id"), max_length=80)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("feedback")
        verbose_name_plural = _("feedback")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["message", "client_id"], name="feedback_one_per_message_and_client"),
            models.CheckConstraint(
                condition=models.Q(kind="thumbs", score__lte=1) | models.Q(kind="rating", score__gte=1, score__lte=5),
                name="feedback_score_fits_kind",
            ),
        ]

    def __str__(self) -> str:
        shown = ("down", "up")[self.score] if self.kind == self.Kind.THUMBS else f"{self.score}/5"
        return f"{self.kind} {shown} on {self.request_id}"
