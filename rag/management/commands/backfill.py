"""`manage.py backfill [--limit N] [--no-wait]`: LLM descriptions (zh-hant + en) for chunks that have none.

Descriptions are stored on the Chunk rows and added to the chunk's searchable text in the live index, so a
question in one language finds a chunk written in the other (see rag.documents.backfill). Resumable: chunks
described before are skipped. Like reindex, every run is a BackfillJob row, run here when this command can open
the vector store, else by the server's job runner while this command follows it; Ctrl-C cancels the job (the
shared flow is rag.documents.follow.job_command_run).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.documents.backfill import backfill_job_execute
from rag.documents.follow import (
    JobCommand,
    describe_outcome,
    in_thread,
    job_command_run,
    job_follow,
    server_runner_available,
)
from rag.documents.models import BackfillJob, Job, JobStatus
from rag.documents.services import backfill_job_create
from rag.retrieval.embedding import Embedder, bind_embedder_loop
from rag.retrieval.store import VectorStore
from rag.wiring import build_embedder, build_llm_backend, check_embedding_settings, configure_concurrency_manager

NO_LLM = (
    "No LLM is configured here (LLM_BASE_URL is empty) and no running server's job runner answers to run the "
    "backfill with its own: set LLM_BASE_URL, or start the server (make run) and run backfill again. Nothing was "
    "changed."
)
SERVER_LLM = "No LLM is configured here (LLM_BASE_URL is empty): the running server's job runner uses its own."
LOCKED_HELP = (
    "The embedded vector store at {path} is held by another process and no job runner answers for it. Stop that "
    "process and run backfill again, or run the server with its job runner (it runs the job, this command "
    "follows it)."
)
BACKFILL = JobCommand(noun="backfill", command="backfill", locked_help=LOCKED_HELP)


class Command(BaseCommand):
    help = "Write zh-hant and English descriptions of chunks with the LLM and add them to the searchable text."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="describe at most N chunks in this run")
        parser.add_argument(
            "--no-wait", action="store_true", help="queue the job for the server and return without following it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1", returncode=2)
        if not settings.LLM_BASE_URL:
            self._through_the_server(limit=limit, no_wait=options["no_wait"])
            return
        try:
            check_embedding_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        job = job_command_run(
            BACKFILL,
            out=self.stdout,
            create=lambda: backfill_job_create(limit=limit, created_from="command"),
            execute=_execute,
            on_loop=configure_concurrency_manager,
            no_wait=options["no_wait"],
        )
        if job is not None:
            self._report(job)  # type: ignore[arg-type]

    def _through_the_server(self, *, limit: int | None, no_wait: bool) -> None:
        """Without an LLM here the server may still have one (its environment, not this shell's): leave the
        job to its runner, as reindex does when the server holds the store; with no server, fail (exit 1)."""
        if not server_runner_available():
            raise CommandError(NO_LLM, returncode=1)
        job = backfill_job_create(limit=limit, created_from="command")
        label = BACKFILL.label(job)
        if no_wait:
            self.stdout.write(f"{SERVER_LLM} Queued {label}; the server runs it.")
            return
        self.stdout.write(f"{SERVER_LLM} Following {label} (Ctrl-C cancels the job).")
        self._report(job_follow(job, out=self.stdout, label=label))  # type: ignore[arg-type]

    def _report(self, job: BackfillJob) -> None:
        if job.status != JobStatus.SUCCEEDED:
            tail = f" Described {job.updated} chunks before it stopped; run backfill again to continue."
            raise CommandError(describe_outcome(job, label=BACKFILL.label(job)) + tail)
        seconds = job.seconds or 0.0
        self.stdout.write(
            self.style.SUCCESS(
                f"Described {job.updated} chunks in {seconds:.2f} s ({job.unchanged} described before, "
                f"{job.failed} failed, {job.skipped} skipped)."
            )
        )
        if job.failed:
            self.stdout.write(self.style.WARNING("Chunks that failed are tried again by the next backfill."))


async def _execute(job: Job, store: VectorStore, stop: threading.Event) -> None:
    assert isinstance(job, BackfillJob)
    llm = build_llm_backend()
    embedder: Embedder = await in_thread(build_embedder, llm)  # a local model loads from disk: off the loop
    # the LLM calls run on this loop; so do the embedding calls of the job's worker thread
    bind_embedder_loop(embedder, asyncio.get_running_loop())
    await backfill_job_execute(job=job, store=store, embedder=embedder, llm=llm, stop=stop)
