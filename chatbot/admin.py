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
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from chatbot.curation import message_answers_approve
from chatbot.feedback import feedback_export_rows, feedback_with_question
from chatbot.gaps import gap_impact, gap_topics_mark_handled
from chatbot.insights import MAX_DAYS, insights_csv, insights_summary
from chatbot.models import Conversation, Feedback, GapTopic, Message
from rag.workflows.testset import publish_test_from_answer

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
    actions = ("approve_as_curated", "add_to_publish_tests")

    @admin.action(description=_("Add to the publish test set"), permissions=["add_test"])
    def add_to_publish_tests(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        added, skipped = _publish_tests_from_answers(queryset)
        self.message_user(
            request,
            _(
                "%(added)d question(s) added to the publish test set, %(skipped)d skipped (not a good answer, "
                "citing no source, or already in the set). Fill in the facts each answer must contain under "
                "Publish tests."
            )
            % {"added": added, "skipped": skipped},
        )

    def has_add_test_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("rag_workflows.add_publishtest")

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


GOOD_OUTCOMES = ("", Message.Outcome.ANSWERED, Message.Outcome.CACHED, Message.Outcome.CURATED)


def _publish_tests_from_answers(messages: QuerySet[Message]) -> tuple[int, int]:
    """A publish test per good answer among `messages` (answered with sources): its question, its sources to cite,
    the request id as origin. How many were added and skipped."""
    answers = [
        m
        for m in messages
        if m.role == Message.Role.ASSISTANT and m.status == Message.Status.OK and m.outcome in GOOD_OUTCOMES
    ]
    questions = dict(
        Message.objects.filter(request_id__in=[m.request_id for m in answers], role=Message.Role.USER).values_list(
            "request_id", "content"
        )
    )
    added = 0
    for answer in answers:
        question = questions.get(answer.request_id, "")
        added += (
            publish_test_from_answer(question=question, sources=answer.sources, request_id=answer.request_id)
            is not None
        )
    return added, len(messages) - added


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


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _day_bars(per_day: list[dict[str, Any]], *, width: int = 720, height: int = 160) -> dict[str, Any]:
    """A bar per day (all questions, the answered ones over them), as numbers for the template's SVG."""
    peak = max((day["questions"] for day in per_day), default=0) or 1
    step = width / max(len(per_day), 1)
    base = height - 2
    bars = []
    for i, day in enumerate(per_day):
        h_all = round(day["questions"] / peak * (height - 20), 1)
        h_ok = round(day["answered"] / peak * (height - 20), 1)
        bars.append(
            {
                **day,
                "x": round(i * step + 1, 1),
                "w": round(max(step - 2, 1), 1),
                "y_all": round(base - h_all, 1),
                "h_all": h_all,
                "y_ok": round(base - h_ok, 1),
                "h_ok": h_ok,
            }
        )
    return {"width": width, "height": height, "base": base, "bars": bars, "peak": peak}


# The insights button's label, translated by the template below.
gettext_noop("Insights")


@cache
def _gaps_change_list_template() -> Any:
    return engines["django"].from_string(
        '{% extends "admin/change_list.html" %}{% load i18n %}'
        "{% block object-tools-items %}"
        "<li><a href=\"{% url 'admin:chatbot_insights' %}\" class=\"viewlink\">{% translate 'Insights' %}</a></li>"
        "{{ block.super }}{% endblock %}"
    )


@admin.register(GapTopic)
class GapTopicAdmin(admin.ModelAdmin):
    """What the content could not answer, by topic; the insights page hangs off it."""

    @property
    def change_list_template(self) -> Any:  # type: ignore[override]
        return _gaps_change_list_template()

    list_display = ("label", "count", "impact", "language_list", "last_seen", "handled_at", "curate")
    list_filter = (("handled_at", admin.EmptyFieldListFilter),)
    search_fields = ("label", "examples")
    readonly_fields = (
        "label",
        "count",
        "refused",
        "weak",
        "disliked",
        "languages",
        "examples",
        "closest",
        "daily",
        "concepts",
        "first_seen",
        "last_seen",
        "handled_at",
        "handled_by",
    )
    exclude = ("centroid",)
    actions = ("mark_handled",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[GapTopic]:
        return super().get_queryset(request).defer("centroid")

    @admin.display(description=_("impact"))
    def impact(self, obj: GapTopic) -> int:
        return gap_impact(obj)

    @admin.display(description=_("languages"))
    def language_list(self, obj: GapTopic) -> str:
        return ", ".join(f"{language} {count}" for language, count in sorted(obj.languages.items()))

    @admin.display(description=_("add a curated answer"))
    def curate(self, obj: GapTopic) -> str:
        url = reverse("admin:rag_curated_curatedanswer_add") + "?" + urlencode({"question": obj.label})
        return format_html('<a href="{}">{}</a>', url, _("add a curated answer"))

    @admin.action(description=_("Mark handled"), permissions=["change"])
    def mark_handled(self, request: HttpRequest, queryset: QuerySet[GapTopic]) -> None:
        handled = gap_topics_mark_handled(
            ids=list(queryset.values_list("pk", flat=True)), handled_by=request.user.get_username()
        )
        self.message_user(request, _("%(count)d topic(s) marked handled.") % {"count": handled})

    def get_urls(self) -> list[URLPattern]:
        return [
            path("insights/", self.admin_site.admin_view(self.insights_view), name="chatbot_insights"),
            path("insights.csv", self.admin_site.admin_view(self.insights_csv_view), name="chatbot_insights_csv"),
            *super().get_urls(),
        ]

    def _days(self, request: HttpRequest) -> int:
        raw = request.GET.get("days", "30")
        return min(int(raw), MAX_DAYS) if raw.isdigit() and int(raw) > 0 else 30

    def insights_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        days = self._days(request)
        summary = insights_summary(days=days)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Insights"),
            "days": days,
            "s": summary,
            "rates": {
                "answered": _percent(summary["answered_rate"]),
                "satisfaction": _percent(summary["satisfaction"]["rate"]),
                "cache": _percent(summary["cache_hit_rate"]),
                "curated": _percent(summary["curated_hit_rate"]),
            },
            "chart": _day_bars(summary["per_day"]),
            "csv_url": reverse("admin:chatbot_insights_csv"),
        }
        return TemplateResponse(request, "admin/chatbot/insights.html", context)

    def insights_csv_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        response = HttpResponse(insights_csv(insights_summary(days=self._days(request))), content_type="text/csv")
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="insights-{stamp}.csv"'
        return response
