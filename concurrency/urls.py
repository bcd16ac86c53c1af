"""The concurrency APIs; the project includes these at its root: ``path("", include("concurrency.urls"))``."""

from __future__ import annotations

from django.urls import path

from concurrency import api

app_name = "concurrency"

urlpatterns = [
    path("api/v1/admin/concurrency/status", api.status, name="status"),
    path("api/v1/admin/concurrency/summary", api.summary, name="summary"),
    path("api/v1/admin/concurrency/priority", api.priority, name="priority"),
    path("api/v1/admin/concurrency/settings", api.settings_view, name="settings"),
]
