"""HTTP API of this app (included at the site root by chatbot/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from rag.workflows import api

app_name = "rag_workflows"

DRAFT = "api/v1/rag/workflows/drafts/<int:draft_id>"

urlpatterns: list[URLPattern] = [
    path("api/v1/rag/nodes", api.nodes, name="nodes"),
    path("api/v1/rag/test-run", api.test_run, name="test-run"),
    path("api/v1/rag/workflows/validate", api.validate, name="validate"),
    path("api/v1/rag/workflows/default", api.default_workflow, name="default"),
    path("api/v1/rag/workflows/drafts", api.drafts, name="drafts"),
    path(DRAFT, api.draft, name="draft"),
    path(f"{DRAFT}/versions", api.draft_versions, name="draft-versions"),
    path(f"{DRAFT}/versions/<int:version>", api.draft_version, name="draft-version"),
    path(f"{DRAFT}/diff", api.draft_diff, name="draft-diff"),
    path(f"{DRAFT}/validate", api.draft_validate, name="draft-validate"),
    path(f"{DRAFT}/restore", api.draft_restore, name="draft-restore"),
    path(f"{DRAFT}/publish", api.draft_publish, name="draft-publish"),
    path(f"{DRAFT}/check", api.draft_check, name="draft-check"),
    path(f"{DRAFT}/unpublish", api.draft_unpublish, name="draft-unpublish"),
    path("api/v1/rag/workflows/prompts/<slug:name>/<int:version>/check", api.prompt_check, name="prompt-check"),
]
