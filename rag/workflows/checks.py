"""Tests before publishing: the test set run against a draft's saved version and, beside it, the production
workflow of the backend; `publish_check_gate` is what `workflow_draft_publish` asks before it publishes.

A test passes when the answer holds every fact of `must_contain` (compared as rag.evaluation.metrics does:
case, width and spacing folded) and cites every source of `must_cite` (a document id or a link among the answer's
sources). A regression is a test production passes and the draft fails: it blocks publishing that version unless a
staff member overrides it with a reason, which is kept on the check.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from prompts.errors import PromptPublishBlocked
from prompts.models import Prompt
from prompts.snapshot import PromptSnapshot, snapshot_build
from rag.engine import WorkflowDefinition, compile_workflow
from rag.evaluation.metrics import comparable
from rag.prompting.prompts import OrganisationPrompts, RegistryPrompts
from rag.runtime import AskRequest, PipelineRun, PipelineRuntime
from rag.state import PipelineState
from rag.workflows.models import CheckResults, PromptCheck, PublishCheck, PublishTest, WorkflowDraft

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
    label = f"'{draft.name}' v{draft.version}"
    if _gate(
        PublishCheck.objects.filter(draft=draft, version=draft.version),
        override_reason=override_reason,
        overridden_by=overridden_by,
        untested=lambda: PublishBlocked(f"{label} has not been run against the test set"),
        regressing=lambda check: PublishBlocked(_regressing(label, check), check),
        new=lambda: PublishCheck(draft=draft, version=draft.version, backend=draft.backend or ""),
    ):
        logger.warning("workflow.publish_override draft=%s version=%s by=%s", draft.pk, draft.version, overridden_by)


def _regressing(label: str, check: CheckResults) -> str:
    return f"{label} fails {check.regressions} test(s) production passes; publishing it needs an override with a reason"


def _gate(
    checks: Any,
    *,
    override_reason: str,
    overridden_by: str,
    untested: Callable[[], Exception],
    regressing: Callable[[Any], Exception],
    new: Callable[[], CheckResults],
) -> bool:
    """The publish gate of both kinds of check: nothing to do without an active test set or when the version's
    last check (locked) has no regression; else refused (`untested`, `regressing`) unless a reason is given, which
    is recorded on the check (a new one when it was never run). True when an override was recorded."""
    if not PublishTest.objects.filter(active=True).exists():
        return False
    check = checks.select_for_update().first()
    if check is not None and not check.regressions:
        return False
    reason = override_reason.strip()
    if not reason:
        raise untested() if check is None else regressing(check)
    if check is None:
        check = new()
    check.override_reason = reason
    check.overridden_by = overridden_by
    with transaction.atomic():
        check.save()
    return True


def publish_check_detail(check: PublishCheck) -> dict[str, Any]:
    return {
        "id": check.pk,
        "draft_id": check.draft_id,
        "version": check.version,
        **_results_detail(check),
    }


def publish_tests_count() -> int:
    """The active tests a version runs: none means publishing needs no check."""
    return PublishTest.objects.filter(active=True).count()


# --- prompt versions ------------------------------------------------------------------------------------------


class PinnedPrompts:
    """The production prompts, except one name served at the version under test."""

    def __init__(self, inner: Any, snapshot: PromptSnapshot) -> None:
        self._inner = inner
        self._snapshot = snapshot

    async def get(self, name: str) -> Any:
        return self._snapshot if name == self._snapshot.name else await self._inner.get(name)


async def _answer_with(runtime: PipelineRuntime, deps: Any, question: str, backend: str) -> Any:
    """The backend's serving workflow compiled with `deps` of its own: not through the runtime's compiled-graph
    cache (its key knows the workflow and the settings, not which prompts the nodes were given), and without the
    semantic cache or coalescing (either would hand the candidate production's answer)."""
    definition = runtime.workflow_for(backend)
    graph = compile_workflow(definition, registry=runtime.registry, deps=deps, fingerprint=definition.fingerprint())
    state = PipelineState(
        request_id=AskRequest(question=question).request_id,
        question=question,
        backend=backend,
        client_id="publish-check",
        producer=runtime.producer(backend, graph.fingerprint, deps),
    )
    run = PipelineRun(graph, state, stream_timeout=runtime.stream_timeout, idle_timeout=runtime.idle_timeout).start()
    parts: list[str] = []
    async with asyncio.timeout(ANSWER_TIMEOUT):
        async for event in run.events():
            if event["channel"] == "answer":
                parts.append(event["delta"])
    return "".join(parts), [source.as_dict() for source in run.outcome().sources]


def _candidate_snapshot(name: str, version: int) -> PromptSnapshot:
    row = Prompt.objects.get(name=name, version=version)
    return snapshot_build(
        name=name, version=version, labels=row.labels, template=row.template, config=row.config, source="database"
    )


async def prompt_version_check(*, runtime: PipelineRuntime, name: str, version: int, backend: str) -> PromptCheck:
    """Run the active test set with `version` of prompt `name` and, beside it, with the production prompts; store
    the check. Prompt.DoesNotExist for an unknown version. Without an LLM the offline rules use no prompt, so both
    sides answer alike."""
    snapshot = await asyncio.to_thread(_candidate_snapshot, name, version)
    deps = dataclasses.replace(await runtime.deps(), cache=None)
    candidate = dataclasses.replace(
        deps, prompts=OrganisationPrompts(PinnedPrompts(RegistryPrompts(), snapshot), deps.organisation)
    )
    tests = [test async for test in PublishTest.objects.filter(active=True)]
    results: list[dict[str, Any]] = []
    for test in tests:
        answer, sources = await _answer_with(runtime, candidate, test.question, backend)
        mine = answer_verdict(test, answer=answer, sources=sources)
        answer, sources = await _answer_with(runtime, deps, test.question, backend)
        theirs = answer_verdict(test, answer=answer, sources=sources)
        results.append(_result_row(test, mine, theirs))
    passed = sum(row["draft_passed"] for row in results)
    return await PromptCheck.objects.acreate(
        prompt_name=name,
        prompt_version=version,
        backend=backend,
        results=results,
        passed=passed,
        failed=len(results) - passed,
        regressions=sum(row["production_passed"] and not row["draft_passed"] for row in results),
    )


def _result_row(test: PublishTest, mine: Verdict, theirs: Verdict) -> dict[str, Any]:
    # the same keys as a workflow draft's check: "draft" is the version under test
    return {
        "test_id": test.pk,
        "question": test.question,
        "draft_passed": mine.passed,
        "draft_missing": mine.missing,
        "production_passed": theirs.passed,
        "production_missing": theirs.missing,
    }


def prompt_publish_gate(*, name: str, version: int, override_reason: str, overridden_by: str) -> None:
    """prompts.services' publish gate: refuse production to a version whose last check regresses (or that was
    never checked while a test set exists), unless `override_reason` is given; an override is recorded."""
    if _gate(
        PromptCheck.objects.filter(prompt_name=name, prompt_version=version),
        override_reason=override_reason,
        overridden_by=overridden_by,
        untested=lambda: PromptPublishBlocked(
            f"{name} v{version} has not been run against the publish tests; run them, or give a reason"
        ),
        regressing=lambda check: PromptPublishBlocked(_regressing(f"{name} v{version}", check)),
        new=lambda: PromptCheck(prompt_name=name, prompt_version=version, backend=""),
    ):
        logger.warning("prompt.publish_override prompt=%s version=%s by=%s", name, version, overridden_by)


def prompt_check_detail(check: PromptCheck) -> dict[str, Any]:
    return {
        "id": check.pk,
        "prompt": check.prompt_name,
        "version": check.prompt_version,
        **_results_detail(check),
    }


def _results_detail(check: CheckResults) -> dict[str, Any]:
    """The fields both kinds of check share, as their JSON details give them."""
    return {
        "backend": check.backend,
        "passed": check.passed,
        "failed": check.failed,
        "regressions": check.regressions,
        "results": check.results,
        "override_reason": check.override_reason,
        "overridden_by": check.overridden_by,
        "created_at": check.created_at.isoformat(),
    }
