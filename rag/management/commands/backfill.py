"""`manage.py backfill [--limit N] [--no-wait]`: LLM descriptions (zh-hant + en) for chunks that have none.

Descriptions are stored on the Chunk rows and added to the chunk's searchable text in the live index, so a
question in one language finds a chunk written in the other (see rag.documents.backfill). Resumable: chunks
described before are skipped. Like reindex, every run is a BackfillJob row, run here when this command can open
the vector store, else by the server's job runner while this command follows it; Ctrl-C cancels the job.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.documents.backfill import backfill_job_execute
from rag.documents.follow import InProcess, describe_outcome, job_follow, server_runner_available
from rag.documents.models import BackfillJob, JobStatus
from rag.documents.services import backfill_job_create, runner_name
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.store import StoreLockedError, VectorStore, open_store_from_settings

NO_LLM = (
    "No LLM is configured (LLM_BASE_URL is empty): backfill needs one to write the descriptions. Nothing was changed."
)
LOCKED_HELP = (
    "The embedded vector store at {path} is held by another process and no job runner answers for it. Stop that "
    "process and run backfill again, or run the server with its job runner (it runs the job, this command "
    "follows it)."
)


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
            self.stdout.write(NO_LLM)
            return
        try:
            store: VectorStore | None = open_store_from_settings()
        except StoreLockedError as exc:
            if not server_runner_available():
                raise CommandError(LOCKED_HELP.format(path=exc.path)) from exc
            store = None
        if store is not None and not store.local and server_runner_available(probe=False):
            store.close()
            store = None

        job = backfill_job_create(limit=limit, created_from="command")
        if store is None:
            if options["no_wait"]:
                self.stdout.write(f"Queued backfill job #{job.pk}; the server runs it.")
                return
            self.stdout.write(f"Backfill job #{job.pk} runs in the server; following it (Ctrl-C cancels the job).")
            job = job_follow(job, out=self.stdout, label=f"backfill job #{job.pk}")
        else:
            with store:
                if options["no_wait"]:
                    self.stdout.write(
                        f"Queued backfill job #{job.pk}. No server holds the vector store, so nobody runs it until "
                        "one starts with the job runner; run backfill without --no-wait to run it now."
                    )
                    return
                job = self._run_here(job, store)
        self._report(job)

    def _run_here(self, job: BackfillJob, store: VectorStore) -> BackfillJob:
        from rag.wiring import build_llm_backend, configure_concurrency_manager

        llm = build_llm_backend()
        embedder = LexicalEmbedder()

        async def main(stop: threading.Event) -> None:
            # the process's concurrency manager, with the deployment's limits, on this loop
            configure_concurrency_manager()
            try:
                await backfill_job_execute(job=job, store=store, embedder=embedder, llm=llm, stop=stop)
            finally:
                from rag.llm.client import aclose_clients

                await aclose_clients()

        local = InProcess(
            job, runner=runner_name(), store_owner=store.local, body=lambda stop: asyncio.run(main(stop))
        ).start()
        try:
            followed = job_follow(job, out=self.stdout, label=f"backfill job #{job.pk}", local=local)
        finally:
            local.stop.set()
            local.join()
        return followed  # type: ignore[return-value]

    def _report(self, job: BackfillJob) -> None:
        if job.status != JobStatus.SUCCEEDED:
            tail = f" Described {job.updated} chunks before it stopped; run backfill again to continue."
            raise CommandError(describe_outcome(job, label=f"backfill job #{job.pk}") + tail)
        seconds = job.seconds or 0.0
        self.stdout.write(
            self.style.SUCCESS(
                f"Described {job.updated} chunks in {seconds:.2f} s ({job.unchanged} described before, "
                f"{job.failed} failed, {job.skipped} skipped)."
            )
        )
        if job.failed:
            self.stdout.write(self.style.WARNING("Chunks that failed are tried again by the next backfill."))
