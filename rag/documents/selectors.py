"""Reads of the documents app: jobs as the API and the admin show them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from rag.documents.models import BackfillJob, IndexJob, Job

JobKind = Literal["index", "backfill"]
JOB_KINDS: dict[str, type[Job]] = {"index": IndexJob, "backfill": BackfillJob}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def job_get(*, kind: str, job_id: int) -> Job | None:
    model = JOB_KINDS.get(kind)
    if model is None:
        return None
    return model.objects.select_related("created_by").filter(pk=job_id).first()


def jobs_recent(*, kind: str, limit: int = 20) -> list[Job]:
    return list(JOB_KINDS[kind].objects.select_related("created_by").order_by("-created_at", "-id")[:limit])


def job_kind(job: Job) -> JobKind:
    return "backfill" if isinstance(job, BackfillJob) else "index"


def job_as_dict(*, job: Job) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": job.pk,
        "kind": job_kind(job),
        "status": job.status,
        "stage": job.stage,
        "finished": job.finished,
        "progress": {"done": job.progress_done, "total": job.progress_total, "percent": job.percent},
        "counts": {
            "added": job.added,
            "updated": job.updated,
            "unchanged": job.unchanged,
            "deleted": job.deleted,
            "skipped": job.skipped,
            "failed": job.failed,
        },
        "cancel_requested": job.cancel_requested,
        "error": job.error,
        "log": job.log,
        "report": job.report or {},
        "created_by": job.created_by.get_username() if job.created_by is not None else None,
        "created_from": job.created_from,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "seconds": None if job.seconds is None else round(job.seconds, 3),
        "runner": job.runner,
    }
    if isinstance(job, IndexJob):
        data.update(
            paths=list(job.paths or []),
            format=job.format,
            full=job.full,
            if_empty=job.if_empty,
            chunks=job.chunks,
            chunks_embedded=job.chunks_embedded,
            collection=job.collection,
        )
    elif isinstance(job, BackfillJob):
        data.update(limit=job.limit)
    return data
