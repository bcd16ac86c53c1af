"""URLs for the concurrency tests until the project includes ``concurrency.urls``: the admin and the APIs."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("concurrency.urls")),
]
