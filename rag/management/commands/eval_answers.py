"""`manage.py eval_answers FILE [--judge] [--limit-questions N] [--offline]`: answer quality, end to end.

Loads a SQuAD-format file (every paragraph a document, as `eval_retrieval` does), indexes it into a store of its
own (a temporary local Qdrant folder: never the live index), and asks every question through the product's
pipeline: the node registry, the default workflow and dependencies built from the settings (the configured LLM,
or the offline rules without `LLM_BASE_URL` or with `--offline`; no semantic cache, no rate limit). Reports:

- containment: the share of answers whose text holds a gold answer;
- citation accuracy: of the answers that cite, the share where a cited passage holds a gold answer;
- outcomes: how many answers cite a passage, answer without citing any (`uncited_rate`), are the pipeline's
  refusal (not found, out of scope: `refusal_rate`), or ended in an error;
- answer length (characters, median and mean) and latency p50/p95 (request to terminal event);
- with `--judge`: the configured LLM grades each answer with the versioned prompt `answer-judge`
  (faithfulness to the cited passages and relevance, 1-5, with a reason), mean scores reported with how many
  were judged, skipped (refusals and errors) and failed, and the failures by kind, even when every call failed.

The run is stored as an `AnswerEvaluation` (admin: Rag > Answer evaluations) and printed as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag import wiring
from rag.branding.selectors import organisation_source
from rag.deps import PipelineDeps
from rag.evaluation.metrics import AnswerRecord, summarize
from rag.evaluation.runner import ask_all, judge_all, judge_prompt_version
from rag.llm.client import aclose_clients
from rag.models import AnswerEvaluation
from rag.nodes import build_registry
from rag.prompting.prompts import OrganisationPrompts, RegistryPrompts
from rag.retrieval.embedding import bind_embedder_loop
from rag.retrieval.indexer import build_index
from rag.retrieval.loaders import SquadFile, chunking_for, read_squad
from rag.retrieval.loaders.base import SkipFile
from rag.retrieval.markdown import LoadError
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.store import VectorStore
from rag.runtime import PipelineRuntime
from rag.workflows.default import default_workflow

_WORST_SHOWN = 20  # answers without the gold kept in the stored summary, to read what went wrong


class Command(BaseCommand):
    help = "Measure answers on a SQuAD-format file through the product's pipeline, in a temporary store of its own."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="SQuAD-format JSON: data[].paragraphs[].context and qas")
        parser.add_argument("--judge", action="store_true", help="grade each answer with the configured LLM")
        parser.add_argument("--offline", action="store_true", help="answer with the offline rules even with an LLM")
        parser.add_argument("--limit-questions", type=int, default=0, help="ask only the first N questions (0: all)")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        errors: list[LoadError] = []
        try:
            squad = read_squad(path, doc_prefix=path.stem, language=None, errors=errors)
        except SkipFile as exc:
            raise CommandError(f"{path}: {exc.reason}") from exc
        # a question without a gold answer text cannot be scored here (retrieval's evaluation still uses it)
        questions = [question for question in squad.questions if any(a.strip() for a in question.answers)]
        if options["limit_questions"] > 0:
            questions = questions[: options["limit_questions"]]
        if not questions:
            raise CommandError(f"{path}: no answerable questions in the file")
        for error in errors:
            self.stderr.write(f"skipped {error}")
        try:
            llm = None if options["offline"] else wiring.build_llm_backend()
            embedder = wiring.build_embedder(llm)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        if options["judge"] and llm is None:
            raise CommandError("--judge needs an LLM: set LLM_BASE_URL (and do not pass --offline)")
        mode, search_settings = wiring.search_settings_from_settings(embedder)
        with (
            tempfile.TemporaryDirectory(prefix="eval-answers-") as folder,
            VectorStore.open("eval", path=folder) as store,
        ):
            deps = PipelineDeps(
                retriever=StoreRetriever(store, embedder, mode=mode, settings=search_settings),
                config=wiring.pipeline_config_from_settings(),
                llm=llm,
            )
            if llm is not None:
                deps.prompts = OrganisationPrompts(RegistryPrompts(), organisation_source())
            summary = asyncio.run(_evaluate(squad, questions, deps, store, embedder, judge=options["judge"]))
        summary = {"file": path.name, "embedder": embedder.name, "mode": mode} | summary
        run = _store(summary)
        summary["evaluation_id"] = run.pk
        self.stdout.write(json.dumps(summary, ensure_ascii=False))


async def _evaluate(
    squad: SquadFile, questions: Sequence[Any], deps: PipelineDeps, store: VectorStore, embedder: Any, *, judge: bool
) -> dict[str, Any]:
    """Index the file, ask every question through a runtime of the product's nodes and workflow, judge."""
    wiring.configure_concurrency_manager()
    bind_embedder_loop(embedder, asyncio.get_running_loop())
    runtime = PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())
    version = None
    try:
        report = await asyncio.to_thread(build_index, squad.documents, store, embedder, config=chunking_for("squad"))
        started = time.perf_counter()
        records = await ask_all(runtime, questions)
        asked_seconds = time.perf_counter() - started
        if judge and deps.llm is not None and deps.prompts is not None:
            version = await judge_prompt_version(deps.prompts)
            await judge_all(deps.llm, deps.prompts, records)
    finally:
        bind_embedder_loop(embedder, None)
        await aclose_clients()
    fingerprint = runtime.compile(runtime.workflow_for("chat"), deps).fingerprint
    out = summarize(records) | {
        "producer": runtime.producer("chat", fingerprint, deps),
        "documents": report.documents,
        "chunks": report.chunks,
        "index_seconds": round(report.seconds, 3),
        "asked_seconds": round(asked_seconds, 3),
        "missed": _missed(records),
    }
    if version is not None:
        out["judge_prompt_version"] = version
    return out


def _missed(records: Sequence[AnswerRecord]) -> list[dict[str, Any]]:
    """The first answers without a gold answer, to read what went wrong."""
    missed = [r for r in records if not r.contains_gold][:_WORST_SHOWN]
    return [
        {"id": r.question_id, "question": r.question, "gold": r.golds[0] if r.golds else "", "answer": r.body[:300]}
        for r in missed
    ]


def _store(summary: dict[str, Any]) -> AnswerEvaluation:
    judge = summary.get("judge") or {}
    return AnswerEvaluation.objects.create(
        dataset=summary["file"],
        producer=summary["producer"],
        questions=summary["questions"],
        containment=summary["containment"],
        citation_accuracy=summary["citation_accuracy"],
        refusal_rate=summary["refusal_rate"],
        answer_chars_median=summary["answer_chars_median"],
        latency_ms_p50=summary["latency_ms_p50"],
        latency_ms_p95=summary["latency_ms_p95"],
        judge_prompt_version=summary.get("judge_prompt_version"),
        faithfulness=judge.get("faithfulness"),
        relevance=judge.get("relevance"),
        summary=summary,
    )
