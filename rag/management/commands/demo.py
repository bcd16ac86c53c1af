"""`manage.py demo load [--if-new]` / `manage.py demo remove` / `manage.py demo status`: the demo organisation.

The demo (a fictional help centre, `rag/corpus/demo`) is data: `load` copies its documents into CORPUS_DIR,
sets its name and words, and indexes them; `remove` deletes exactly what it copied, puts the neutral words back
and drops its documents from the index. `make run` loads it on a first start (`--if-new`), so a new user gets
answers at once; once removed it stays removed.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.branding.selectors import demo_state_get
from rag.branding.services import DemoError, demo_load, demo_remove
from rag.documents.follow import describe_outcome, job_command_run
from rag.documents.models import IndexJob, JobStatus
from rag.management.commands.reindex import REINDEX, index_job_run
from rag.wiring import configure_concurrency_manager


class Command(BaseCommand):
    help = "Load or remove the demo organisation (its documents, name, words and suggested questions)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("load", "remove", "status"))
        parser.add_argument(
            "--if-new", action="store_true", help="load only if the demo was never loaded or removed here (set-up)"
        )
        parser.add_argument("--no-wait", action="store_true", help="queue the index job for the server")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        state = demo_state_get()
        if action == "status":
            loaded = bool(state and state.loaded)
            self.stdout.write(f"The demo is {'loaded' if loaded else 'not loaded'}.")
            return
        if action == "load":
            if options["if_new"] and state is not None:
                self.stdout.write("The demo was loaded or removed before; nothing to do (--if-new).")
                return
            job: IndexJob | None = demo_load()
            self.stdout.write("Demo organisation's name and words set; indexing its documents.")
        else:
            try:
                job = demo_remove()
            except DemoError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write("Demo files deleted and the neutral name and words put back.")
            if job is None:
                self.stdout.write("No demo document was in the corpus; nothing to drop from the index.")
                return
        assert job is not None
        finished = job_command_run(
            REINDEX,
            out=self.stdout,
            create=lambda: job,
            execute=index_job_run,
            on_loop=configure_concurrency_manager,
            no_wait=options["no_wait"],
        )
        if finished is None:
            return
        if finished.status != JobStatus.SUCCEEDED:
            raise CommandError(describe_outcome(finished, label=REINDEX.label(finished)))
        assert isinstance(finished, IndexJob)
        if action == "load":
            self.stdout.write(
                self.style.SUCCESS(
                    f"Demo loaded: {finished.added + finished.updated + finished.unchanged} documents indexed."
                )
            )
        else:
            self.stdout.write(self.style.SUCCESS(f"Demo removed: {finished.deleted} documents dropped from the index."))
