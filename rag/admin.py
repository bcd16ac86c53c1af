"""The admin's list of answer evaluations (`manage.py eval_answers`), newest first, to compare runs."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from rag.models import AnswerEvaluation


@admin.register(AnswerEvaluation)
class AnswerEvaluationAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "dataset",
        "producer",
        "questions",
        "containment",
        "citation_accuracy",
        "refusal_rate",
        "answer_chars_median",
        "latency_ms_p50",
        "faithfulness",
        "relevance",
    )
    list_filter = ("dataset", "producer")
    readonly_fields = [field.name for field in AnswerEvaluation._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs come from the command, never typed in
