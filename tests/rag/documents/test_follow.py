"""Following a job from a command: Ctrl-C records the cancel wherever it lands, the pause after a busy database
included, and a cancel that meets SQLite's busy writer is asked again instead of crashing the command."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.db import OperationalError

from rag.documents import follow
from rag.documents.models import IndexJob, JobStatus
from rag.documents.services import index_job_create

pytestmark = pytest.mark.django_db(transaction=True)


def running_job() -> IndexJob:
    job = index_job_create(created_from="command")
    IndexJob.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    return job


def test_ctrl_c_in_the_pause_after_a_busy_database_still_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    job = running_job()
    reads = {"n": 0}
    real_refresh = IndexJob.refresh_from_db

    def refresh(self: IndexJob, *args: Any, **kwargs: Any) -> None:
        reads["n"] += 1
        if reads["n"] == 1:
            raise OperationalError("database is locked")
        real_refresh(self, *args, **kwargs)
        if self.cancel_requested:  # the runner would stop the job at its next batch
            IndexJob.objects.filter(pk=self.pk).update(status=JobStatus.CANCELLED)
            real_refresh(self, *args, **kwargs)

    sleeps = {"n": 0}

    def sleep(_seconds: float) -> None:
        sleeps["n"] += 1
        if sleeps["n"] == 1:  # the pause after the busy read: where Ctrl-C went unhandled before
            raise KeyboardInterrupt

    monkeypatch.setattr(IndexJob, "refresh_from_db", refresh)
    monkeypatch.setattr(follow.time, "sleep", sleep)
    monkeypatch.setattr(follow, "_check_remote", lambda *a, **k: None)
    out = StringIO()
    finished = follow.job_follow(job, out=out, label="index job", interval=0.0)
    assert finished.status == JobStatus.CANCELLED
    assert "Cancelling index job" in out.getvalue()


def test_a_cancel_that_meets_a_busy_writer_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    job = running_job()
    calls = {"n": 0}
    real_cancel = follow.job_cancel

    def cancel(*, job: IndexJob) -> bool:
        calls["n"] += 1
        if calls["n"] < 3:
            raise OperationalError("database is locked")
        return real_cancel(job=job)

    monkeypatch.setattr(follow, "job_cancel", cancel)
    monkeypatch.setattr(follow.time, "sleep", lambda _seconds: None)
    follow._cancel_when_free(job, 0.0)
    assert calls["n"] == 3
    assert IndexJob.objects.get(pk=job.pk).cancel_requested


def test_a_cancel_that_fails_otherwise_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    job = running_job()
    calls = {"n": 0}

    def cancel(*, job: IndexJob) -> bool:
        calls["n"] += 1
        raise OperationalError("no such table: rag_indexjob")

    monkeypatch.setattr(follow, "job_cancel", cancel)
    with pytest.raises(OperationalError, match="no such table"):
        follow._cancel_when_free(job, 0.0)
    assert calls["n"] == 1
