"""Tests before publishing: the test set run against a draft's saved version and, beside it, the production
workflow of the backend; `publish_check_gate` is what `workflow_draft_publish` asks before it publishes.

A test passes when the answer holds every fact of `must_contain` (compared as rag.evaluation.metrics does:
case, width and spacing folded) and cites every source of `must_cite` (a document id or a link among the answer's
sources). A regression is a test production passes and the draft fails: it blocks publishing that version unless a
staff member overrides it with a reason, which is kept on the check.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from rag.engine import WorkflowDefinition
from rag.evaluation.metrics import comparable
from rag.runtime import AskRequest, PipelineRuntime
from rag.workflows.models import PublishCheck, PublishTest, WorkflowDraft

logger = logging.getLogger(__name__)

ANSWER_TIMEOUT = 120.0


class PublishBlocked(Exception):
    """The draft's version regresses on the test set (or was never checked) and no override was given; `check` is
    the version's latest run of the test set (None when it was never run), for the publish dialog to show."""

    def __init__(self, message: str, check: PublishCheck | None = None) -> None:
        super().__init__(message)
        self.check = check


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    missing: list[str]


def answer_verdict(test: PublishTest, *, answer: str, sources: list[dict[str, Any]]) -> Verdict:
    text = comparable(answer)
    missing = [fact for fact in test.must_contain if comparable(str(fact)) not in text]
    cited = {str(s.get("doc_id", "")) for s in sources} | {str(s.get("url", "")) for s in sources}
    missing += [f"source {source}" for source in test.must_cite if str(source) not in cited]
    return Verdict(not missing, missing)


async def _answer(runtime: PipelineRuntime, question: str, backend: str, workflow: WorkflowDefinition | None) -> Any:
    run = await runtime.start(
        AskRequest(question=question, backend=backend, client_id="publish-check"), workflow=workflow
    )
    parts: list[str] = []
    async with asyncio.timeout(ANSWER_TIMEOUT):
        async for event in run.events():
            if event["channel"] == "answer":
                parts.append(event["delta"])
    outcome = run.outcome()
    return "".join(parts), [source.as_dict() for source in outcome.sources]


async def workflow_draft_check(*, runtime: PipelineRuntime, draft_id: int, backend: str) -> PublishCheck:
    """Run the active test set against the draft's saved version and against production; store the check."""
    draft = await WorkflowDraft.objects.aget(pk=draft_id)
    tests = [test async for test in PublishTest.objects.filter(active=True)]
    definition = WorkflowDefinition.from_dict(draft.graph)
    results: list[dict[str, Any]] = []
    passed = regressions = 0
    for test in tests:
        draft_answer, draft_sources = await _answer(runtime, test.question, backend, definition)
        production_answer, production_sources = await _answer(runtime, test.question, backend, None)
        mine = answer_verdict(test, answer=draft_answer, sources=draft_sources)
        theirs = answer_verdict(test, answer=production_answer, sources=production_sources)
        passed += mine.passed
        regressions += theirs.passed and not mine.passed
        results.append(
            {
                "test_id": test.pk,
                "question": test.question,
                "draft_passed": mine.passed,
                "draft_missing": mine.missing,
                "production_passed": theirs.passed,
                "production_missing": theirs.missing,
            }
        )
    return await PublishCheck.objects.acreate(
        draft=draft,
        version=draft.version,
        backend=backend,
        results=results,
        passed=passed,
        failed=len(results) - passed,
        regressions=regressions,
    )


def publish_check_gate(*, draft: WorkflowDraft, override_reason: str = "", overridden_by: str = "") -> None:
    """Inside the publish's transaction: refuse a version whose last check regresses (or that was never checked
    while a test set exists), unless `override_reason` is given; an override is recorded on the check."""
    if not PublishTest.objects.filter(active=True).exists():
        return
    check = PublishCheck.objects.select_for_update().filter(draft=draft, version=draft.version).first()
    if check is not None and not check.regressions:
        return
    reason = override_reason.strip()
    if not reason:
        if check is None:
            raise PublishBlocked(f"'{draft.name}' v{draft.version} has not been run against the test set")
        raise PublishBlocked(
            f"'{draft.name}' v{draft.version} fails {check.regressions} test(s) production passes; "
            "publishing it needs an override with a reason",
            check,
        )
    if check is None:
        check = PublishCheck(draft=draft, version=draft.version, backend=draft.backend or "")
    check.override_reason = reason
    check.overridden_by = overridden_by
    with transaction.atomic():
        check.save()
    logger.warning("workflow.publish_override draft=%s version=%s by=%s", draft.pk, draft.version, overridden_by)


def publish_check_detail(check: PublishCheck) -> dict[str, Any]:
    return {
        "id": check.pk,
        "draft_id": check.draft_id,
        "version": check.version,
        "backend": check.backend,
        "passed": check.passed,
        "failed": check.failed,
        "regressions": check.regressions,
        "results": check.results,
        "override_reason": check.override_reason,
        "overridden_by": check.overridden_by,
        "created_at": check.created_at.isoformat(),
    }


def publish_tests_count() -> int:
    """The active tests a version runs: none means publishing needs no check."""
    return PublishTest.objects.filter(active=True).count()
