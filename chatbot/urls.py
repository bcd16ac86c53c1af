"""Django's URLs. The SSE endpoints and the WebSocket are routed to Channels consumers in `chatbot.routing`."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from chatbot import views
from chatbot.sites import views as site_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("concurrency.urls")),
    path("", include("rag.documents.urls")),
    path("", include("rag.workflows.urls")),
    path("", include("chatbot.insights_api")),
    path("", views.chat_page, name="chat"),
    path("api/v1/health", views.health, name="health"),
    path("api/v1/ready", views.ready, name="ready"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("api/v1/chat/conversations", views.conversation_list_api, name="conversation-list"),
    path("api/v1/chat/conversations/<uuid:conversation_id>", views.conversation_detail_api, name="conversation-detail"),
    path("api/v1/rag/forms/export.csv", views.forms_export_csv, name="forms-export"),
    path("api/v1/rag/feedback", include("chatbot.api_feedback")),
    path("forms/<path:name>", views.form_download, name="form-download"),
    # The embeddable widget (chatbot.sites): its script, one site's configuration, and the iframe mode.
    path("widget.js", site_views.widget_js, name="widget-js"),
    path("api/v1/widget/<str:key>", site_views.widget_config, name="widget-config"),
    path("embed/<str:key>", site_views.embed_page, name="widget-embed"),
]
