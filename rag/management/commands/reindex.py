"""`manage.py reindex [PATH ...] [--format F] [--full] [--if-empty] [--no-wait]`: update the search index.

Incremental: unchanged documents keep their vectors (copied from the live build), changed and new ones are
embedded, documents gone from the given paths are removed; the new build replaces the live one in one alias
switch (see rag.documents.indexing). Every run is an IndexJob row. When this command can open the vector store
it runs the job itself; when another process holds it (the running server, Qdrant local mode allowing one
process) the server's job runner runs it and this command follows its progress. Ctrl-C cancels the job (the
shared flow is rag.documents.follow.job_command_run).

The embedder is the one rag.wiring gives the server's retriever (lexical, an OpenAI-compatible server, or a local
sentence-transformers model), so the build is in the space the server's queries are embedded in.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.documents.follow import JobCommand, describe_outcome, in_thread, job_command_run
from rag.documents.indexing import index_job_execute
from rag.documents.models import IndexJob, Job, JobStatus
from rag.documents.services import index_job_create
from rag.documents.sources import FORMATS
from rag.retrieval.embedding import Embedder, bind_embedder_loop
from rag.retrieval.loaders import ATTACHMENT_REASON
from rag.retrieval.store import VectorStore
from rag.wiring import build_embedder, check_embedding_settings, configure_concurrency_manager

LOCKED_HELP = (
    "The embedded vector store at {path} is held by another process, most likely the running server "
    "(`make run` / daphne), and no job runner answers for it. Qdrant local mode allows one process at a time: "
    "stop the server and run reindex again, or run a server that has the job runner (it runs the job and this "
    "command follows it). (Or set QDRANT_URL to use a Qdrant server.)"
)
REINDEX = JobCommand(noun="index", command="reindex", locked_help=LOCKED_HELP, api_path="/api/v1/rag/index-jobs/")


class Command(BaseCommand):
    help = (
        "Index help-centre documents (default: CORPUS_DIR) into the vector store, re-embedding only what changed, "
        "and switch the live index at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", type=Path, help="files or folders (default: CORPUS_DIR)")
        parser.add_argument("--format", choices=FORMATS, default="auto", help="how to read the files (default: auto)")
        parser.add_argument("--full", action="store_true", help="re-embed every document, changed or not")
        parser.add_argument(
            "--if-empty", action="store_true", help="do nothing when the live index already has chunks (for set-up)"
        )
        parser.add_argument(
            "--no-wait", action="store_true", help="queue the job for the server and return without following it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # a bad embedder choice (a missing model folder...) is reported before any job is created
            check_embedding_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        paths = [str(Path(p).resolve()) for p in options["paths"]]

        def create() -> Job:
            return index_job_create(
                paths=paths,
                format=options["format"],
                full=options["full"],
                if_empty=options["if_empty"],
                created_from="command",
            )

        def before_create(store: VectorStore) -> bool:
            if options["if_empty"]:
                count = store.count()
                if count:
                    self.stdout.write(f"{store.alias} already holds {count} chunks; nothing to do (--if-empty).")
                    return False
            return True

        job = job_command_run(
            REINDEX,
            out=self.stdout,
            create=create,
            execute=execute_index_job,
            on_loop=configure_concurrency_manager,
            no_wait=options["no_wait"],
            before_create=before_create,
        )
        if job is not None:
            self._report(job)  # type: ignore[arg-type]

    def _report(self, job: IndexJob) -> None:
        report = job.report or {}
        skipped_files = report.get("skipped_files", [])
        # A form's attachment (its PDF) is offered for download, not indexed, by design: one quiet line, not a
        # warning per file.
        attachments = [item for item in skipped_files if str(item.get("reason", "")).startswith(ATTACHMENT_REASON)]
        skipped = [item for item in skipped_files if item not in attachments]
        for item in skipped:
            self.stderr.write(f"skipped {item['path']}: {item['reason']}")
        if job.status != JobStatus.SUCCEEDED:
            raise CommandError(describe_outcome(job, label=REINDEX.label(job)))
        if report.get("if_empty"):
            alias = settings.QDRANT_COLLECTION
            self.stdout.write(f"{alias} already holds {job.chunks} chunks; nothing to do (--if-empty).")
            return
        replaced = f"; replaced {report['replaced']}" if report.get("replaced") else ""
        seconds = float(report.get("seconds") or job.seconds or 0.0)
        self.stdout.write(
            self.style.SUCCESS(
                f"Indexed {report.get('documents', 0)} documents into {job.chunks} chunks in {seconds:.2f} s "
                f"({job.collection}, live as {settings.QDRANT_COLLECTION}{replaced})."
            )
        )
        embedded = report.get("embedded", 0) + report.get("reencoded", 0)
        self.stdout.write(
            f"Documents: {job.added} added, {job.updated} updated, {job.unchanged} unchanged, {job.deleted} deleted, "
            f"{job.skipped - len(attachments)} skipped. Chunks: {embedded} embedded, "
            f"{report.get('copied', 0)} reused from the previous build."
        )
        for doc_id in report.get("stale", []):
            self.stdout.write(f"kept the indexed version of {doc_id}: its source could not be read this time")
        if attachments:
            self.stdout.write(f"{len(attachments)} form attachment(s) kept for download (not indexed, by design).")
        if job.skipped > len(attachments):
            self.stdout.write(self.style.WARNING(f"{job.skipped - len(attachments)} file(s) skipped, see above."))


async def execute_index_job(job: Job, store: VectorStore, stop: threading.Event) -> None:
    assert isinstance(job, IndexJob)
    embedder: Embedder = await in_thread(build_embedder)  # a local model loads from disk: off the loop
    # the indexing thread's embedding calls run on this loop, under its concurrency manager
    bind_embedder_loop(embedder, asyncio.get_running_loop())
    await in_thread(index_job_execute, job=job, store=store, embedder=embedder, stop=stop)
