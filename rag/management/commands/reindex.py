"""`manage.py reindex [PATH ...] [--format F] [--full] [--if-empty] [--no-wait]`: update the search index.

Incremental: unchanged documents keep their vectors (copied from the live build), changed and new ones are
embedded, documents gone from the given paths are removed; the new build replaces the live one in one alias
switch (see rag.documents.indexing). Every run is an IndexJob row. When this command can open the vector store
it runs the job itself; when another process holds it (the running server, Qdrant local mode allowing one
process) the server's job runner runs it and this command follows its progress. Ctrl-C cancels the job.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.documents.follow import InProcess, describe_outcome, job_follow, server_runner_available
from rag.documents.indexing import index_job_execute
from rag.documents.models import IndexJob, JobStatus
from rag.documents.services import index_job_create, runner_name
from rag.documents.sources import FORMATS
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.store import StoreLockedError, VectorStore, open_store_from_settings

LOCKED_HELP = (
    "The embedded vector store at {path} is held by another process, most likely the running server "
    "(`make run` / daphne), and no job runner answers for it. Qdrant local mode allows one process at a time: "
    "stop the server and run reindex again, or run a server that has the job runner (it runs the job and this "
    "command follows it). (Or set QDRANT_URL to use a Qdrant server.)"
)


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
        if settings.EMBEDDING_BASE_URL:
            # the server's retriever must embed queries in the same space as this build
            raise CommandError("EMBEDDING_BASE_URL is set, but reindex only supports the offline lexical embedding yet")
        paths = [str(Path(p).resolve()) for p in options["paths"]]
        job_options = {
            "paths": paths,
            "format": options["format"],
            "full": options["full"],
            "if_empty": options["if_empty"],
            "created_from": "command",
        }
        try:
            store: VectorStore | None = open_store_from_settings()
        except StoreLockedError as exc:
            if not server_runner_available():
                raise CommandError(LOCKED_HELP.format(path=exc.path)) from exc
            store = None
        if store is not None and not store.local and server_runner_available(probe=False):
            # a server's runner is alive on a shared (Qdrant server) store: it runs jobs, this command follows
            store.close()
            store = None

        if store is None:
            job = index_job_create(**job_options)
            if options["no_wait"]:
                self.stdout.write(f"Queued index job #{job.pk}; the server runs it (/api/v1/rag/index-jobs/{job.pk}).")
                return
            self.stdout.write(f"Index job #{job.pk} runs in the server; following it (Ctrl-C cancels the job).")
            job = job_follow(job, out=self.stdout, label=f"index job #{job.pk}")
        else:
            with store:
                if options["if_empty"]:
                    count = store.count()
                    if count:
                        self.stdout.write(f"{store.alias} already holds {count} chunks; nothing to do (--if-empty).")
                        return
                job = index_job_create(**job_options)
                if options["no_wait"]:
                    self.stdout.write(
                        f"Queued index job #{job.pk}. No server holds the vector store, so nobody runs it until one "
                        "starts with the job runner; run reindex without --no-wait to run it now."
                    )
                    return
                job = self._run_here(job, store)
        self._report(job)

    def _run_here(self, job: IndexJob, store: VectorStore) -> IndexJob:
        # the same embedder rag.wiring gives the server's retriever (its default dimensions)
        embedder = LexicalEmbedder()

        def body(stop: threading.Event) -> None:
            index_job_execute(job=job, store=store, embedder=embedder, stop=stop)

        local = InProcess(job, runner=runner_name(), store_owner=store.local, body=body).start()
        try:
            followed = job_follow(job, out=self.stdout, label=f"index job #{job.pk}", local=local)
        finally:
            local.stop.set()
            local.join()
        return followed  # type: ignore[return-value]

    def _report(self, job: IndexJob) -> None:
        report = job.report or {}
        for item in report.get("skipped_files", []):
            self.stderr.write(f"skipped {item['path']}: {item['reason']}")
        if job.status != JobStatus.SUCCEEDED:
            raise CommandError(describe_outcome(job, label=f"index job #{job.pk}"))
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
        self.stdout.write(
            f"Documents: {job.added} added, {job.updated} updated, {job.unchanged} unchanged, {job.deleted} deleted, "
            f"{job.skipped} skipped. Chunks: {report.get('embedded', 0) + report.get('reencoded', 0)} embedded, "
            f"{report.get('copied', 0)} reused from the previous build."
        )
        for doc_id in report.get("stale", []):
            self.stdout.write(f"kept the indexed version of {doc_id}: its source could not be read this time")
        if job.skipped:
            self.stdout.write(self.style.WARNING(f"{job.skipped} file(s) skipped, see above."))
