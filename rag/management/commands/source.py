"""`manage.py source add|sync|list|remove`: the organisation's content sources and their syncs.

    source add --name NAME (--url URL | --sitemap URL | --folder PATH) [--every 6h] [--include GLOB]
               [--exclude GLOB] [--max-pages N] [--base-url URL] [--internal] [--rate N]
    source sync NAME [--wait] [--full]
    source list
    source remove NAME [--wait]

A sync is an index job with the source set: the server's job runner runs it (one at a time per source, however
many workers), or with `--wait` this command follows it, running it itself when no server holds the store (the
flow `reindex` uses). A source with `--every` is synced on that schedule by the job runner; the schedule is the
source row's next sync time, so it survives restarts.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from rag.documents.follow import JobCommand, describe_outcome, job_command_run
from rag.documents.models import IndexJob, Job, JobStatus, Source, SourceKind
from rag.documents.services import SourceInvalid, source_create, source_sync_request
from rag.management.commands.reindex import LOCKED_HELP, index_job_run
from rag.wiring import check_embedding_settings, configure_concurrency_manager

SYNC = JobCommand(noun="sync", command="source sync", locked_help=LOCKED_HELP, api_path="/api/v1/rag/index-jobs/")
_EVERY_RE = re.compile(r"^\s*(\d+)\s*([mhd])\s*$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def parse_every(raw: str) -> timedelta:
    """ "30m", "6h", "1d" as a timedelta; CommandError naming the value otherwise."""
    match = _EVERY_RE.match(raw or "")
    if match is None:
        raise CommandError(f"--every {raw!r}: give a number and m, h or d (30m, 6h, 1d)")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


class Command(BaseCommand):
    help = "Add, sync, list and remove the sources (websites, sitemaps, folders) the index is kept in step with."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="add a source")
        add.add_argument("--name", required=True)
        where = add.add_mutually_exclusive_group(required=True)
        where.add_argument("--url", help="a website's start page (its same-site links are followed)")
        where.add_argument("--sitemap", help="a sitemap or sitemap index URL")
        where.add_argument("--folder", help="a folder on this server")
        add.add_argument("--every", help="sync on this schedule: 30m, 6h, 1d (default: only when asked)")
        add.add_argument("--include", action="append", default=[], help="URL path glob to keep (repeatable)")
        add.add_argument("--exclude", action="append", default=[], help="URL path glob to leave out (repeatable)")
        add.add_argument("--max-pages", type=int, default=1000)
        add.add_argument("--base-url", default="", help="links of folder documents: this + the relative path")
        add.add_argument("--internal", action="store_true", help="may reach private and loopback addresses")
        add.add_argument("--rate", type=float, default=2.0, help="requests per second (default 2)")
        add.add_argument("--concurrency", type=int, default=2, help="requests at once (default 2)")
        sync = actions.add_parser("sync", help="sync a source now")
        sync.add_argument("name")
        sync.add_argument("--wait", action="store_true", help="follow the sync to its end")
        sync.add_argument("--full", action="store_true", help="ask for every page in full and re-embed")
        actions.add_parser("list", help="list the sources")
        remove = actions.add_parser("remove", help="remove a source and its documents from the index")
        remove.add_argument("name")
        remove.add_argument("--wait", action="store_true", help="follow the removal to its end")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "add":
            self._add(options)
        elif action == "list":
            self._list()
        else:
            self._sync(options, remove=action == "remove")

    def _add(self, options: dict[str, Any]) -> None:
        kind = SourceKind.WEBSITE if options["url"] else SourceKind.SITEMAP if options["sitemap"] else SourceKind.FOLDER
        try:
            source = source_create(
                name=options["name"],
                kind=kind,
                url=options["url"] or options["sitemap"] or "",
                folder=options["folder"] or "",
                include=options["include"],
                exclude=options["exclude"],
                max_pages=options["max_pages"],
                every=parse_every(options["every"]) if options["every"] else None,
                base_url=options["base_url"],
                internal=options["internal"],
                rate=options["rate"],
                concurrency=options["concurrency"],
            )
        except SourceInvalid as exc:
            raise CommandError(str(exc)) from exc
        schedule = f", synced every {source.every}" if source.every else "; run `source sync` to index it"
        self.stdout.write(self.style.SUCCESS(f"Added source {source.name} ({source.get_kind_display()}){schedule}."))

    def _list(self) -> None:
        sources = list(Source.objects.select_related("last_job").order_by("name"))
        if not sources:
            self.stdout.write("No sources.")
            return
        for source in sources:
            where = source.url or source.folder
            every = f"every {source.every}" if source.every else "on request"
            state = "paused" if source.paused else every
            last = source.last_sync_at.isoformat(timespec="seconds") if source.last_sync_at else "never"
            nxt = source.next_sync_at.isoformat(timespec="seconds") if source.next_sync_at else "-"
            job = source.last_job
            outcome = f"job #{job.pk} {job.status}" if job is not None else "no job"
            self.stdout.write(f"{source.name}\t{source.kind}\t{where}\t{state}\tlast {last}\tnext {nxt}\t{outcome}")

    def _sync(self, options: dict[str, Any], *, remove: bool) -> None:
        source = Source.objects.filter(name=options["name"]).first()
        if source is None:
            raise CommandError(f"no source named {options['name']!r} (see `source list`)")
        try:
            check_embedding_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc

        def create() -> Job:
            return source_sync_request(
                source=source, full=options.get("full", False), remove=remove, created_from="command"
            )

        if not options["wait"]:
            job = create()
            verb = "removal" if remove else "sync"
            self.stdout.write(f"Queued the {verb} of {source.name} as index job #{job.pk}; the job runner runs it.")
            return
        finished = job_command_run(
            SYNC, out=self.stdout, create=create, execute=index_job_run, on_loop=configure_concurrency_manager
        )
        if finished is not None:
            self._report(finished)  # type: ignore[arg-type]

    def _report(self, job: IndexJob) -> None:
        if job.status != JobStatus.SUCCEEDED:
            raise CommandError(describe_outcome(job, label=SYNC.label(job)))
        report = job.report or {}
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted((report.get("outcomes") or {}).items()))
        if outcomes:
            self.stdout.write(f"Pages: {outcomes} (robots.txt: {report.get('robots', '?')}).")
        for page in report.get("pages", []):
            if page.get("outcome") not in ("fetched", "not_modified"):
                self.stderr.write(f"{page.get('outcome')} {page.get('url')}: {page.get('detail')}")
        self.stdout.write(
            self.style.SUCCESS(
                f"Documents: {job.added} added, {job.updated} updated, {job.unchanged} unchanged, "
                f"{job.deleted} deleted, {job.skipped} skipped ({timezone.now().isoformat(timespec='seconds')})."
            )
        )
