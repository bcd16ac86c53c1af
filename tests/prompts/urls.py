"""The admin alone, so the admin tests do not depend on the project's URL configuration."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
