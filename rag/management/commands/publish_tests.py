"""`manage.py publish_tests import FILE [--no-cite]` and `manage.py publish_tests list [--all]`: the test set a
workflow version runs before it is published (rag.workflows.checks).

`import` reads the files answer evaluation reads (SQuAD-format JSON as `eval_answers` takes, or the demo question
file `scripts/demo_questions.json`; see rag.workflows.testset), in one transaction, and reports what it created,
updated and skipped, with the reasons. Importing the same file again creates nothing. A malformed file is a
CommandError naming the JSON line or the field, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.workflows.models import PublishTest
from rag.workflows.testset import ImportReport, TestFileError, parse_test_file, publish_tests_import


class Command(BaseCommand):
    help = "Import and list the publish test set (questions a workflow must still answer before it is published)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        importing = sub.add_parser("import", help="add the questions of an eval_answers (SQuAD) or demo question file")
        importing.add_argument("file", type=Path)
        importing.add_argument(
            "--no-cite", action="store_true", help="do not require the answering document (not in the live index)"
        )
        listing = sub.add_parser("list", help="the active tests (all with --all)")
        listing.add_argument("--all", action="store_true", help="inactive tests too")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "import":
            self._import(options["file"], cite=not options["no_cite"])
        else:
            self._list(everything=options["all"])

    def _import(self, path: Path, *, cite: bool) -> None:
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        try:
            parsed = parse_test_file(path, cite=cite)
        except TestFileError as exc:
            raise CommandError(f"{path}: {exc}; nothing imported") from exc
        self._report(publish_tests_import(parsed, origin=f"file {path.name}"))

    def _report(self, report: ImportReport) -> None:
        for question in report.created:
            self.stdout.write(f"created: {question}")
        for question in report.updated:
            self.stdout.write(f"updated: {question}")
        for where, reason in report.skipped:
            self.stdout.write(f"skipped {where}: {reason}")
        self.stdout.write(
            f"{len(report.created)} created, {len(report.updated)} updated, {len(report.skipped)} skipped"
        )

    def _list(self, *, everything: bool) -> None:
        tests = PublishTest.objects.all() if everything else PublishTest.objects.filter(active=True)
        count = 0
        for test in tests:
            count += 1
            state = "" if test.active else " (inactive)"
            self.stdout.write(f"#{test.pk}{state} {test.question}")
            self.stdout.write(f"    must contain: {', '.join(map(str, test.must_contain)) or '-'}")
            self.stdout.write(f"    must cite: {', '.join(map(str, test.must_cite)) or '-'}")
            self.stdout.write(f"    origin: {test.origin or '-'}")
        self.stdout.write(f"{count} test(s)")
