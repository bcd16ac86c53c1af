"""Curated answers in the admin: written here, or taken from a logged answer in one click (Messages' action).
Every save or delete reaches every worker within a second (rag.curated.services)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from rag.curated.models import CuratedAnswer
from rag.curated.services import curated_answer_changed


@admin.register(CuratedAnswer)
class CuratedAnswerAdmin(admin.ModelAdmin):
    list_display = ("question", "language", "active", "hits", "last_hit_at", "approved_by", "updated_at")
    list_filter = ("language", "active")
    search_fields = ("question", "answer", "=topic")
    readonly_fields = ("hits", "last_hit_at", "from_request_id", "approved_by", "created_at", "updated_at")
    fields = (
        "question",
        "answer",
        "language",
        "topic",
        "source_url",
        "source_title",
        "active",
        *readonly_fields,
    )

    def save_model(self, request: HttpRequest, obj: CuratedAnswer, form: Any, change: bool) -> None:
        if not obj.approved_by:
            obj.approved_by = request.user.get_username()
        super().save_model(request, obj, form, change)
        curated_answer_changed()

    def delete_model(self, request: HttpRequest, obj: CuratedAnswer) -> None:
        super().delete_model(request, obj)
        curated_answer_changed()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CuratedAnswer]) -> None:
        super().delete_queryset(request, queryset)
        curated_answer_changed()
