"""`manage.py reindex` and `manage.py backfill` in-process (the store is free), and when another process holds it."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from rag.documents import follow
from rag.documents.models import BackfillJob, Chunk, IndexJob, JobRunnerHeartbeat, JobStatus
from rag.retrieval.store import open_store_from_settings
from tests.rag.documents.conftest import CORPUS

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def live_count(root: Path) -> int:
    with open_store_from_settings() as store:
        return store.count()


def test_reindex_runs_in_process_without_a_server_and_reports(
    configured: Path, corpus: Path, private_index: str
) -> None:
    out, err = run("reindex")
    assert err == ""
    assert re.search(r"index job #\d+ \[", out) and "100%" in out
    assert "Indexed 5 documents into" in out and f"live as {private_index}" in out
    assert "Documents: 5 added, 0 updated, 0 unchanged, 0 deleted, 0 skipped." in out
    chunks = int(out.split(" documents into ")[1].split(" chunks")[0])
    assert live_count(configured) == chunks == Chunk.objects.count()
    job = IndexJob.objects.get()
    assert (job.status, job.created_from) == (JobStatus.SUCCEEDED, "command")

    (corpus / "en-enrolment.md").write_text(CORPUS["en-enrolment.md"] + "\nMore.\n")
    out, _ = run("reindex")
    assert "Documents: 0 added, 1 updated, 4 unchanged, 0 deleted, 0 skipped." in out
    assert "reused from the previous build" in out and f"replaced {private_index}__" in out


def test_reindex_if_empty_and_full(configured: Path) -> None:
    out, _ = run("reindex", "--if-empty")
    assert "Indexed 5 documents" in out
    count = live_count(configured)
    out, _ = run("reindex", "--if-empty")
    assert f"already holds {count} chunks; nothing to do" in out
    assert IndexJob.objects.count() == 1  # no job row for a set-up check
    out, _ = run("reindex", "--full")
    assert f"Chunks: {count} embedded, 0 reused" in out


def test_reindex_reports_skipped_files_on_stderr(configured: Path, corpus: Path) -> None:
    (corpus / "broken.md").write_text("---\ntitle: Broken\nlanguage: en\n", encoding="utf-8")
    out, err = run("reindex", str(corpus / "zh-password-reset.md"), str(corpus / "broken.md"))
    assert "Indexed 1 documents" in out
    assert "1 file(s) skipped" in out
    assert "broken.md: front matter is not closed" in err


def test_reindex_with_a_format_leaves_other_formats_alone(configured: Path, corpus: Path) -> None:
    run("reindex")
    (corpus / "notes.txt").write_text("Opening hours of the help desk: 9 to 5.\n")
    out, _ = run("reindex", "--format", "text", str(corpus))
    assert "Documents: 1 added, 0 updated, 0 unchanged, 0 deleted" in out


def test_reindex_without_documents_is_an_error(configured: Path) -> None:
    empty = configured / "empty"
    empty.mkdir()
    with pytest.raises(CommandError, match="no documents to index"):
        run("reindex", str(empty))
    assert IndexJob.objects.get().status == JobStatus.FAILED


def test_a_job_left_to_a_runner_that_never_claims_it_is_given_up(configured: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(follow, "CLAIM_TIMEOUT", 0.3)
    # a runner that beat 14.5 s ago: alive when the command looks, gone half a second later
    beat = timezone.now() - timedelta(seconds=14.5)
    JobRunnerHeartbeat.objects.create(runner="server:1", started_at=beat, seen_at=beat)
    with pytest.raises(CommandError, match="was not picked up"):
        run("reindex")  # a runner is alive: the job is left to it
    assert IndexJob.objects.get().status == JobStatus.CANCELLED


def test_no_wait_queues_the_job(configured: Path) -> None:
    out, _ = run("reindex", "--no-wait")
    assert "Queued index job #" in out
    assert IndexJob.objects.get().status == JobStatus.PENDING
    assert live_count(configured) == 0


def test_backfill_without_an_llm_or_a_server_fails_saying_what_to_do_and_changes_nothing(configured: Path) -> None:
    run("reindex")
    described_before = list(Chunk.objects.values_list("chunk_id", "described_at"))
    with pytest.raises(CommandError) as refused:
        run("backfill")
    assert refused.value.returncode == 1
    message = str(refused.value)
    assert "No LLM is configured here (LLM_BASE_URL is empty)" in message and "Nothing was changed." in message
    assert "start the server" in message
    assert not BackfillJob.objects.exists()
    assert list(Chunk.objects.values_list("chunk_id", "described_at")) == described_before


def test_backfill_limit_must_be_positive(configured: Path) -> None:
    with pytest.raises(CommandError, match="at least 1"):
        run("backfill", "--limit", "0")
