"""`manage.py publish_tests import FILE [--no-cite]`, `list [--all]`, `check-draft DRAFT_ID` and
`check-prompt NAME VERSION`: the test set a workflow version or a prompt version runs before it is published
(rag.workflows.checks).

`import` reads the files answer evaluation reads (SQuAD-format JSON as `eval_answers` takes, or the demo question
file `scripts/demo_questions.json`; see rag.workflows.testset), in one transaction, and reports what it created,
updated and skipped, with the reasons. Importing the same file again creates nothing. A malformed file is a
CommandError naming the JSON line or the field, and nothing is written.

`check-draft` and `check-prompt` run the test set against a workflow draft's saved version or a prompt version,
beside production, in this process's own runtime (as the builder's check and the prompt check API do), store the
check that publishing reads, print each test's verdicts, and exit 1 on a regression.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from prompts.models import Prompt
from rag.provider import get_runtime, provide_runtime
from rag.runtime import BACKENDS
from rag.wiring import get_runtime as build_runtime
from rag.wiring import reset_runtime
from rag.workflows.checks import prompt_version_check, workflow_draft_check
from rag.workflows.models import PromptCheck, PublishCheck, PublishTest, WorkflowDraft
from rag.workflows.testset import ImportReport, TestFileError, parse_test_file, publish_tests_import

Check = PublishCheck | PromptCheck


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
        draft = sub.add_parser("check-draft", help="run the tests against a workflow draft's saved version")
        draft.add_argument("draft_id", type=int)
        prompt = sub.add_parser("check-prompt", help="run the tests with a prompt version beside production's")
        prompt.add_argument("name")
        prompt.add_argument("version", type=int)
        for checking in (draft, prompt):
            checking.add_argument("--backend", choices=BACKENDS, default="chat")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "import":
            self._import(options["file"], cite=not options["no_cite"])
        elif action == "list":
            self._list(everything=options["all"])
        elif action == "check-draft":
            draft_id, backend = options["draft_id"], options["backend"]
            if not WorkflowDraft.objects.filter(pk=draft_id).exists():
                raise CommandError(f"no workflow draft {draft_id}")
            self._check(lambda: workflow_draft_check(runtime=get_runtime(), draft_id=draft_id, backend=backend))
        else:
            name, version, backend = options["name"], options["version"], options["backend"]
            if not Prompt.objects.filter(name=name, version=version).exists():
                raise CommandError(f"prompt {name!r} has no version {version}")
            self._check(
                lambda: prompt_version_check(runtime=get_runtime(), name=name, version=version, backend=backend)
            )

    def _check(self, run: Callable[[], Awaitable[Check]]) -> None:
        provide_runtime(build_runtime)  # this process's own runtime, closed when the check is done
        try:
            check = asyncio.run(_run(run))
        finally:
            reset_runtime()
        for row in check.results:
            self.stdout.write(f"{row['question']}: {_verdict(row, 'draft')}; production {_verdict(row, 'production')}")
        self.stdout.write(f"{check.passed} passed, {check.failed} failed, {check.regressions} regression(s)")
        if check.regressions:
            raise CommandError(f"{check.regressions} regression(s): publishing needs an override with a reason")

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


async def _run(run: Callable[[], Awaitable[Check]]) -> Check:
    return await run()


def _verdict(row: dict[str, Any], side: str) -> str:
    if row[f"{side}_passed"]:
        return "pass"
    return f"FAIL (missing {', '.join(row[f'{side}_missing'])})"
