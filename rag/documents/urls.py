"""HTTP API of this app (included at the site root by chatbot/urls.py)."""

from django.urls import URLPattern, path

from rag.documents import api

urlpatterns: list[URLPattern] = [
    path("api/v1/rag/index-jobs", api.index_jobs, name="rag-index-jobs"),
    path("api/v1/rag/index-jobs/<int:job_id>", api.index_job, name="rag-index-job"),
    path("api/v1/rag/index-jobs/<int:job_id>/cancel", api.index_job_cancel, name="rag-index-job-cancel"),
    path("api/v1/rag/uploads", api.uploads, name="rag-uploads"),
    path("api/v1/rag/backfill-jobs", api.backfill_jobs, name="rag-backfill-jobs"),
    path("api/v1/rag/backfill-jobs/<int:job_id>", api.backfill_job, name="rag-backfill-job"),
    path("api/v1/rag/backfill-jobs/<int:job_id>/cancel", api.backfill_job_cancel, name="rag-backfill-job-cancel"),
]
