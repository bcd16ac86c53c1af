"""Claiming and cancelling job rows: one job at a time, oldest first, abandoned jobs failed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rag.documents.models import BackfillJob, IndexJob, JobStatus
from rag.documents.services import (
    backfill_job_create,
    index_job_create,
    job_cancel,
    job_claim,
    job_claim_next,
    log_append,
)

pytestmark = pytest.mark.django_db


def test_the_oldest_pending_job_of_either_kind_is_claimed_and_one_runs_at_a_time() -> None:
    first = backfill_job_create()
    second = index_job_create()
    claimed = job_claim_next(runner="host:1")
    assert isinstance(claimed, BackfillJob) and claimed.pk == first.pk
    assert (claimed.status, claimed.runner) == (JobStatus.RUNNING, "host:1")
    assert claimed.started_at is not None and claimed.heartbeat_at is not None
    assert job_claim_next(runner="host:2") is None  # one job at a time, across processes
    assert not job_claim(job=second, runner="host:2")
    BackfillJob.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED)
    claimed = job_claim_next(runner="host:2")
    assert isinstance(claimed, IndexJob) and claimed.pk == second.pk
    assert job_claim_next(runner="host:2") is None


def test_a_job_whose_runner_stopped_beating_is_failed_and_the_next_one_runs() -> None:
    stuck = index_job_create()
    job_claim_next(runner="dead:1")
    IndexJob.objects.filter(pk=stuck.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    waiting = index_job_create()
    claimed = job_claim_next(runner="host:2")
    assert claimed is not None and claimed.pk == waiting.pk
    stuck.refresh_from_db()
    assert stuck.status == JobStatus.FAILED and "dead:1 stopped" in stuck.error and stuck.finished_at


def test_the_owner_of_the_local_store_fails_other_runners_jobs_at_once() -> None:
    other = index_job_create()
    job_claim_next(runner="old-server:1")
    mine = index_job_create()
    assert job_claim(job=mine, runner="command:2", store_owner=True)
    other.refresh_from_db()
    assert other.status == JobStatus.FAILED


def test_cancel_a_pending_job_at_once_a_running_one_by_request_a_finished_one_not() -> None:
    pending = index_job_create()
    assert job_cancel(job=pending)
    assert pending.status == JobStatus.CANCELLED and pending.finished_at is not None
    running = index_job_create()
    job_claim(job=running, runner="host:1")
    assert job_cancel(job=running)
    assert running.status == JobStatus.RUNNING and running.cancel_requested
    IndexJob.objects.filter(pk=running.pk).update(status=JobStatus.SUCCEEDED)
    running.refresh_from_db()
    assert not job_cancel(job=running)
    assert job_claim_next(runner="host:1") is None  # a cancelled job is never claimed


def test_bad_job_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        index_job_create(format="odt")
    with pytest.raises(ValueError, match="limit"):
        backfill_job_create(limit=0)


def test_the_log_keeps_its_newest_lines() -> None:
    log = ""
    for i in range(5000):
        log = log_append(log, f"line {i}")
    assert log.endswith("line 4999\n") and log.startswith("[earlier lines dropped]\nline ")
    assert len(log) <= 20_000
