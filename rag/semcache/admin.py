"""Staff view of the semantic cache: list and inspect entries, delete them (row and vector), flush everything.

Entries are read-only: an answer is corrected by deleting it (the next asker gets a fresh one), never by editing
it. Deletes go through rag.semcache.services so the vector goes with the row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from rag.semcache.active import active_cache
from rag.semcache.models import CacheEntry
from rag.semcache.selectors import cache_entries_summary_get
from rag.semcache.services import cache_entries_delete, cache_entries_delete_all
from rag.text.links import http_link

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


class LiveFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, StrOrPromise]]:
        return [("live", _("Live")), ("expired", _("Expired"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[CacheEntry]) -> QuerySet[CacheEntry]:
        if self.value() == "live":
            return queryset.filter(expires_at__gt=timezone.now())
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        return queryset


@admin.register(CacheEntry)
class CacheEntryAdmin(admin.ModelAdmin):
    change_list_template = "admin/rag_semcache/cacheentry/change_list.html"
    list_display = ("question", "language", "hits", "expires_at", "created_at", "last_hit_at")
    list_filter = ("language", LiveFilter, "index_version", "prompt_version")
    search_fields = ("question", "answer")
    ordering = ("-created_at",)
    list_per_page = 50
    fields = (
        "question",
        "normalized_question",
        "language",
        "answer",
        "sources_display",
        "index_version",
        "prompt_version",
        "hits",
        "created_at",
        "expires_at",
        "last_hit_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: CacheEntry | None = None) -> bool:
        return False

    @admin.display(description=_("sources"))
    def sources_display(self, obj: CacheEntry) -> str:
        items = []
        for source in obj.sources or []:
            ref, title, doc_id = source.get("ref", ""), source.get("title", ""), source.get("doc_id", "")
            link = http_link(source.get("url", ""))  # a stored javascript: or data: URL is shown as text only
            if link:
                items.append(format_html("<li>[{}] <a href='{}'>{}</a> ({})</li>", ref, link, title, doc_id))
            else:
                items.append(format_html("<li>[{}] {} ({})</li>", ref, title, doc_id))
        if not items:
            return "-"
        joined = format_html_join("", "{}", ((item,) for item in items))
        return format_html("<ol style='margin:0;padding-left:1.2em'>{}</ol>", joined)

    # Deleting must take the vector too, or the entry could still be served.
    def delete_model(self, request: HttpRequest, obj: CacheEntry) -> None:
        cache_entries_delete(ids=[str(obj.pk)])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CacheEntry]) -> None:
        cache_entries_delete(ids=[str(pk) for pk in queryset.values_list("pk", flat=True)])

    def get_urls(self) -> list[URLPattern]:
        flush = path("flush/", self.admin_site.admin_view(self.flush_view), name="rag_semcache_cacheentry_flush")
        return [flush, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        cache = active_cache()
        context = {
            "cache_stats": cache.stats() if cache is not None else None,
            "entry_summary": cache_entries_summary_get(now=timezone.now()),
            "can_flush": self.has_delete_permission(request),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context=context)

    def flush_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_delete_permission(request):
            raise PermissionDenied
        deleted = cache_entries_delete_all()
        flushed = ngettext(
            "Semantic cache flushed: %(count)d entry deleted.",
            "Semantic cache flushed: %(count)d entries deleted.",
            deleted,
        ) % {"count": deleted}
        self.message_user(request, flushed, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:rag_semcache_cacheentry_changelist"))
