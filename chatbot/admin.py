"""Conversations, messages and feedback in the admin: for reading, deleting and exporting, never for editing what
was said."""

from __future__ import annotations

import csv
import io
from functools import cache
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from chatbot.curation import message_answers_approve
from chatbot.feedback import feedback_export_rows, feedback_with_question
from chatbot.models import Conversation, Feedback, Message

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

MESSAGE_FIELDS = (
    "role",
    "content",
    "status",
    "error_code",
    "backend",
    "language",
    "intent",
    "sources",
    "usage",
    "trace_id",
    "trace_exported",
    "request_id",
    "latency_ms",
    "outcome",
    "best_score",
    "weak_support",
    "closest",
    "curated_id",
    "background",
    "created_at",
)


class ReadOnlyAdminMixin:
    """A record of what users asked and were told: staff may read and delete it, not rewrite it."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Message
    fields = ("created_at", "role", "status", "intent", "content", "request_id")
    readonly_fields = fields
    extra = 0
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("__str__", "client_id", "message_count", "hidden_at", "updated_at", "created_at")
    list_filter = (("hidden_at", admin.EmptyFieldListFilter),)
    search_fields = ("title", "client_id", "=id")
    date_hierarchy = "updated_at"
    readonly_fields = ("id", "client_id", "title", "summary", "hidden_at", "created_at", "updated_at")
    inlines = (MessageInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        # One query for the counts of a whole changelist page, not one per row.
        return super().get_queryset(request).annotate(_message_count=Count("messages"))

    @admin.display(description=_("messages"), ordering="_message_count")
    def message_count(self, obj: Conversation) -> int:
        return getattr(obj, "_message_count", 0)


class ThumbsFilter(admin.SimpleListFilter):
    """Answers by the thumbs people gave them (any client's)."""

    title = _("thumbs")
    parameter_name = "thumbs"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, StrOrPromise]]:
        return [("up", _("👍 up")), ("down", _("👎 down")), ("none", _("no feedback"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        value = self.value()
        if value in ("up", "down"):
            thumbs = Feedback.objects.filter(kind=Feedback.Kind.THUMBS, score=1 if value == "up" else 0)
            return queryset.filter(pk__in=thumbs.values("message_id"))
        if value == "none":
            return queryset.exclude(pk__in=Feedback.objects.values("message_id"))
        return queryset


@admin.register(Message)
class MessageAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "short_content",
        "role",
        "outcome",
        "score_shown",
        "thumbs",
        "status",
        "intent",
        "language",
        "conversation",
        "created_at",
    )
    list_filter = ("outcome", ThumbsFilter, "weak_support", "status", "intent", "backend", "role", "language")
    search_fields = ("content", "request_id", "trace_id", "conversation__title", "conversation__client_id")
    list_select_related = ("conversation",)
    date_hierarchy = "created_at"
    fields = ("conversation", *MESSAGE_FIELDS)
    readonly_fields = fields
    actions = ("approve_as_curated",)

    @admin.action(description=_("Approve as curated answers"), permissions=["approve"])
    def approve_as_curated(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        approved = message_answers_approve(messages=queryset, approved_by=request.user.get_username())
        self.message_user(request, _("%(count)d curated answer(s) approved.") % {"count": approved})

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("rag_curated.add_curatedanswer")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        # the thumbs of a whole changelist page in the same query, not one per row
        thumbs = Q(feedback__kind=Feedback.Kind.THUMBS)
        return (
            super()
            .get_queryset(request)
            .annotate(
                _up=Count("feedback", filter=thumbs & Q(feedback__score=1)),
                _down=Count("feedback", filter=thumbs & Q(feedback__score=0)),
            )
        )

    @admin.display(description=_("thumbs"))
    def thumbs(self, obj: Message) -> str:
        up, down = getattr(obj, "_up", 0), getattr(obj, "_down", 0)
        return " ".join(part for part in (f"👍{up}" if up else "", f"👎{down}" if down else "") if part)

    @admin.display(description=_("best score"), ordering="best_score")
    def score_shown(self, obj: Message) -> str:
        return "" if obj.best_score is None else f"{obj.best_score:.3f}"

    @admin.display(description=_("content"))
    def short_content(self, obj: Message) -> str:
        return obj.content[:80] + ("…" if len(obj.content) > 80 else "")


def _feedback_csv(queryset: QuerySet[Feedback]) -> HttpResponse:
    # Built in memory: feedback rows are small and an export is a rare staff action; a streamed response would
    # have to be consumed in a worker thread under ASGI anyway.
    buffer = io.StringIO()
    buffer.write("\ufeff")  # Excel reads the file as UTF-8 (Chinese comments) instead of the local code page
    csv.writer(buffer).writerows(feedback_export_rows(queryset=queryset))
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="feedback-{stamp}.csv"'
    return response


# The export button's label, translated by the template below (marked here so that makemessages finds it).
gettext_noop("Export CSV")


@cache
def _feedback_change_list_template() -> Any:
    # The stock changelist plus an export button that keeps the current filters and search. Kept inline so the
    # feedback admin lives in one file; built on first use, after the template engines are configured.
    return engines["django"].from_string(
        '{% extends "admin/change_list.html" %}{% load admin_urls i18n %}'
        "{% block object-tools-items %}"
        '<li><a href="{% url cl.opts|admin_urlname:\'export_csv\' %}{{ cl.get_query_string }}" class="viewlink">'
        "{% translate 'Export CSV' %}</a></li>{{ block.super }}{% endblock %}"
    )


class ScoreFilter(admin.SimpleListFilter):
    """Scores as people gave them: a thumb up or down, or a rating out of five (never a bare 0 or 1)."""

    title = _("score")
    parameter_name = "score"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, StrOrPromise]]:
        return [("up", _("👍 up")), ("down", _("👎 down")), *((str(n), f"{n}/5") for n in range(1, 6))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Feedback]) -> QuerySet[Feedback]:
        value = self.value()
        if value in ("up", "down"):
            return queryset.filter(kind=Feedback.Kind.THUMBS, score=1 if value == "up" else 0)
        if value in {str(n) for n in range(1, 6)}:
            return queryset.filter(kind=Feedback.Kind.RATING, score=int(value))
        return queryset


@admin.register(Feedback)
class FeedbackAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "kind", "score_shown", "short_question", "short_comment", "answer", "request_id")
    list_filter = ("kind", ScoreFilter, "created_at")
    search_fields = ("comment",)
    list_select_related = ("message",)
    date_hierarchy = "created_at"
    fields = (
        "message",
        "kind",
        "score_shown",
        "question",
        "answer_text",
        "comment",
        "request_id",
        "trace_id",
        "client_id",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields
    actions = ("export_csv",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Feedback]:
        return feedback_with_question(super().get_queryset(request))

    @admin.display(description=_("question"))
    def question(self, obj: Feedback) -> str:
        return getattr(obj, "question", None) or "-"

    @admin.display(description=_("question"))
    def short_question(self, obj: Feedback) -> str:
        asked = getattr(obj, "question", None) or ""
        return asked[:60] + ("…" if len(asked) > 60 else "")

    @admin.display(description=_("answer"))
    def answer_text(self, obj: Feedback) -> str:
        return obj.message.content

    @property
    def change_list_template(self) -> Any:  # type: ignore[override]
        return _feedback_change_list_template()

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        export = path("export.csv", self.admin_site.admin_view(self.export_view), name="{}_{}_export_csv".format(*info))
        return [export, *super().get_urls()]

    def export_view(self, request: HttpRequest) -> HttpResponse:
        """Every row the changelist shows with the current filters and search (all of them without any)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        changelist = self.get_changelist_instance(request)
        return _feedback_csv(changelist.get_queryset(request))

    @admin.action(description=_("Export selected feedback as CSV"), permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Feedback]) -> HttpResponse:
        return _feedback_csv(queryset)

    @admin.display(description=_("score"), ordering="score")
    def score_shown(self, obj: Feedback) -> str:
        if obj.kind == Feedback.Kind.THUMBS:
            return "👍" if obj.score else "👎"
        return f"{obj.score}/5"

    @admin.display(description=_("comment"))
    def short_comment(self, obj: Feedback) -> str:
        return obj.comment[:80] + ("…" if len(obj.comment) > 80 else "")

    @admin.display(description=_("answer"))
    def answer(self, obj: Feedback) -> str:
        content = obj.message.content
        return content[:60] + ("…" if len(content) > 60 else "")
