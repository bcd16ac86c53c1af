"""`GET /api/v1/admin/insights/gaps` and `/summary`: the content team's figures as JSON, for a staff session or an
API key with the `admin-read` scope (through the project's one access check, infra.access)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from chatbot.gaps import gaps_report
from chatbot.gaps_task import gaps_refresh
from chatbot.insights import MAX_DAYS, insights_summary
from infra.access import SCOPE_READ, Policy, Rule, staff_api
from infra.jsonio import json_error

READ = Policy(
    read=Rule(refusal=f"staff session or an API key with the '{SCOPE_READ}' scope required", key_scope=SCOPE_READ)
)


def _flag(request: HttpRequest, name: str) -> bool | None:
    value = request.GET.get(name, "false").lower()
    return {"true": True, "1": True, "false": False, "0": False}.get(value)


@never_cache
@staff_api(READ)
@require_GET
async def gaps(request: HttpRequest) -> HttpResponse:
    include_handled = _flag(request, "include_handled")
    if include_handled is None:
        return json_error(400, "bad_request", "'include_handled' must be true or false")
    await gaps_refresh()
    topics = await sync_to_async(gaps_report)(include_handled=include_handled)
    return JsonResponse({"topics": topics, "count": len(topics)})


@never_cache
@staff_api(READ)
@require_GET
async def summary(request: HttpRequest) -> HttpResponse:
    raw = request.GET.get("days", "30")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
        return json_error(400, "bad_request", f"'days' must be a whole number from 1 to {MAX_DAYS}, not {raw!r}")
    await gaps_refresh()
    return JsonResponse(await sync_to_async(insights_summary)(days=int(raw)))


urlpatterns = [
    path("api/v1/admin/insights/gaps", gaps, name="insights-gaps"),
    path("api/v1/admin/insights/summary", summary, name="insights-summary"),
]
