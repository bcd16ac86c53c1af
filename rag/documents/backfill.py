"""The body of a backfill job: the LLM describes chunks in Traditional Chinese and English.

Each description pair is stored on the Chunk row and appended to the chunk's indexed text (its dense and BM25
vectors are computed again and written into the live build), so a question in one language can find a chunk
written in the other. Calls go through the LLM backend (`llm.complete`: the process's concurrency manager and
call policy). The job is resumable (described chunks are skipped next time) and cancellable between batches;
what was described before a cancel or a failure is kept.

The LLM calls run on the event loop; database and vector work run on one thread of the job's own, so the loop
never blocks and the job's database connection is closed when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections, transaction
from django.utils import timezone
from pydantic import Field

from prompts.catalogue import LATEST, PRODUCTION, spec_get
from prompts.errors import PromptNotFoundError
from prompts.selectors import aprompt_get
from prompts.snapshot import snapshot_build
from rag.documents.models import BackfillJob, Chunk, DocumentStatus, JobStatus
from rag.documents.services import JobCancelled, JobTracker, db_retry
from rag.errors import PipelineAbort
from rag.llm.errors import InvalidLLMOutput
from rag.llm.structured import StructuredOutput
from rag.retrieval.embedding import Embedder
from rag.retrieval.indexer import build_compatible, describe_points, live_payloads, refresh_live
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore

logger = logging.getLogger(__name__)

PROMPT_NAME = "description-backfill-system"
NODE = "backfill"


class DescriptionOutput(StructuredOutput):
    """A chunk's description in both languages the help centre serves."""

    zh_hant: str = Field(alias="zh-hant")
    en: str


MAX_DESCRIPTION_CHARS = 300
# calls in flight at once: a background job should leave most of the LLM's slots to people chatting
PARALLEL = 2
# this many failed calls in a row (server down, every call timing out) ends the job instead of burning through
# every chunk; described chunks are kept and the next backfill resumes
FAILURE_STREAK_LIMIT = 5
# in local mode searches answer from an in-memory copy of the index; reloading it after every chunk would cost
# more than the descriptions are worth, so new descriptions become searchable at most this late
REFRESH_INTERVAL = 2.0

T = TypeVar("T")


class BackfillFailed(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ChunkToDescribe:
    pk: int
    point_id: str
    chunk_id: str
    title: str
    text: str


def _clean(value: Any) -> str:
    text = " ".join(str(value or "").split())
    return text[:MAX_DESCRIPTION_CHARS]


async def _prompt(prompts: Any) -> Any:
    """The production version of the prompt (from the registry's memory); the catalogue's default when the
    registry holds none."""
    if prompts is not None:
        return await prompts.get(PROMPT_NAME)
    try:
        return await aprompt_get(name=PROMPT_NAME)
    except PromptNotFoundError:
        spec = spec_get(PROMPT_NAME)
        return snapshot_build(
            name=PROMPT_NAME,
            version=0,
            labels=(PRODUCTION, LATEST),
            template=spec.template,
            config=dict(spec.config),
            source="catalogue",
        )


def _call_options(snapshot: Any, llm: Any) -> dict[str, Any]:
    """temperature / max_tokens from the prompt version's config; a per-node model or temperature configured
    for the deployment (LLM_NODE_MODELS / LLM_NODE_TEMPERATURES) wins, the backend applies those itself."""
    config: Mapping[str, Any] = getattr(snapshot, "config", None) or {}
    llm_config = getattr(llm, "config", None)
    options: dict[str, Any] = {}
    temperature = config.get("temperature")
    if (
        isinstance(temperature, int | float)
        and not isinstance(temperature, bool)
        and NODE not in (getattr(llm_config, "node_temperatures", None) or {})
    ):
        options["temperature"] = float(temperature)
    max_tokens = config.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        options["max_tokens"] = max_tokens
    model = config.get("model")
    if isinstance(model, str) and model and NODE not in (getattr(llm_config, "node_models", None) or {}):
        options["model"] = model
    return options


async def describe_chunk(*, llm: Any, snapshot: Any, title: str, text: str) -> tuple[str, str]:
    """(zh-hant, en) descriptions of one chunk. Raises InvalidLLMOutput for an unusable reply and the LLM
    backend's errors (Busy, UpstreamError, UpstreamTimeout) for failed calls."""
    result = await llm.complete(
        backend="chat",
        node=NODE,
        messages=[
            {"role": "system", "content": snapshot.render(title=title, text=text)},
            {"role": "user", "content": "Describe the chunk above as JSON."},
        ],
        output=DescriptionOutput,
        schema_name="chunk_descriptions",
        **_call_options(snapshot, llm),
    )
    parsed: DescriptionOutput = result.parsed
    zh, en = _clean(parsed.zh_hant), _clean(parsed.en)
    if not zh or not en:
        raise InvalidLLMOutput("a description is empty", text=result.text)
    return zh, en


class _Backfill:
    def __init__(
        self,
        job: BackfillJob,
        *,
        store: VectorStore,
        embedder: Embedder,
        llm: Any,
        prompts: Any,
        stop: threading.Event | None,
        executor: ThreadPoolExecutor,
        parallel: int,
    ) -> None:
        self.job = job
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.prompts = prompts
        self.parallel = max(1, parallel)
        self.executor = executor
        self.tracker = JobTracker(job, stop=stop)
        self.described = self.failed = self.skipped = 0
        self.streak = 0
        self.refreshed_at = time.monotonic()
        self.unpublished = False

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    # on the job's thread

    def select(self) -> tuple[list[ChunkToDescribe], int]:
        """Chunks still without descriptions (up to the job's limit) with their text from the live index, and
        how many chunks are described already."""
        rows = Chunk.objects.filter(
            described_at__isnull=True, document__status__in=(DocumentStatus.INDEXED, DocumentStatus.STALE)
        ).order_by("document__doc_id", "ordinal")
        already = Chunk.objects.filter(described_at__isnull=False).count()
        values = list(rows.values_list("pk", "point_id", "chunk_id", "document__title"))
        if self.job.limit:
            values = values[: self.job.limit]
        work: list[ChunkToDescribe] = []
        for start in range(0, len(values), 256):
            batch = values[start : start + 256]
            payloads = live_payloads(self.store, [point for _, point, _, _ in batch])
            for pk, point, chunk_id, title in batch:
                payload = payloads.get(point)
                if payload is None:
                    self.skipped += 1
                    self.tracker.log(f"skipped {chunk_id}: not in the live index (reindex first)")
                    continue
                work.append(ChunkToDescribe(pk, point, chunk_id, str(payload.get("title") or title), payload["text"]))
        return work, already

    def store_batch(self, results: list[tuple[ChunkToDescribe, str, str]]) -> None:
        """Vectors first, then rows: a row marked described always has its descriptions in the index."""
        if results:
            now = timezone.now()
            missing = set(
                describe_points(
                    self.store,
                    self.embedder,
                    {item.point_id: (zh, en) for item, zh, en in results},
                    described_at=now.isoformat(),
                )
            )
            kept = [(item, zh, en) for item, zh, en in results if item.point_id not in missing]
            for item, _, _ in results:
                if item.point_id in missing:
                    self.skipped += 1
                    self.tracker.log(f"skipped {item.chunk_id}: no longer in the live index")

            def save() -> None:
                with transaction.atomic():
                    for item, zh, en in kept:
                        Chunk.objects.filter(pk=item.pk).update(description_zh=zh, description_en=en, described_at=now)

            db_retry(save)
            self.described += len(kept)
            self.unpublished = True
        if self.unpublished and time.monotonic() - self.refreshed_at >= REFRESH_INTERVAL:
            self.publish()

    def publish(self) -> None:
        if self.unpublished:
            refresh_live(self.store)
            self.unpublished = False
            self.refreshed_at = time.monotonic()

    def compatible(self) -> bool:
        return build_compatible(self.store.metadata(), self.embedder, BM25Encoder())

    def counts(self) -> dict[str, int]:
        return {"updated": self.described, "failed": self.failed, "skipped": self.skipped}

    # on the loop

    async def run(self) -> None:
        if self.llm is None:
            raise BackfillFailed("no LLM is configured (LLM_BASE_URL) in the process running jobs; nothing changed")
        if await self.db(self.store.live_collection) is not None and not await self.db(self.compatible):
            # checked before any LLM call: descriptions could not be embedded into this index
            raise BackfillFailed("the live index was built with another embedder; run reindex --full first")
        await self.db(self.tracker.stage, "selecting")
        work, already = await self.db(self.select)
        await self.db(self.tracker.set, unchanged=already, progress_total=len(work), **self.counts())
        if not work:
            await self.db(self.tracker.log, "every chunk has descriptions; nothing to do")
            return
        snapshot = await _prompt(self.prompts)
        await self.db(self.tracker.stage, "describing")
        done = 0
        for start in range(0, len(work), self.parallel):
            if await self.db(self.tracker.cancelled):
                raise JobCancelled
            batch = work[start : start + self.parallel]
            outcomes = await asyncio.gather(
                *(describe_chunk(llm=self.llm, snapshot=snapshot, title=c.title, text=c.text) for c in batch),
                return_exceptions=True,
            )
            results: list[tuple[ChunkToDescribe, str, str]] = []
            for item, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    await self._failed(item, outcome)
                else:
                    self.streak = 0
                    results.append((item, *outcome))
            await self.db(self.store_batch, results)
            done += len(batch)
            await self.db(self.tracker.set, progress_done=done, **self.counts())

    async def _failed(self, item: ChunkToDescribe, exc: BaseException) -> None:
        if not isinstance(exc, PipelineAbort | InvalidLLMOutput | TimeoutError):
            raise exc
        self.failed += 1
        reason = exc.reason if isinstance(exc, InvalidLLMOutput) else (str(exc) or type(exc).__name__)
        await self.db(self.tracker.log, f"failed {item.chunk_id}: {reason}")
        if isinstance(exc, InvalidLLMOutput):
            return  # the model answered: the server works, this chunk just got a bad reply
        self.streak += 1
        if self.streak >= FAILURE_STREAK_LIMIT:
            raise BackfillFailed(
                f"the LLM failed {self.streak} times in a row ({reason}); described chunks are kept, "
                "run backfill again later to continue"
            )


async def backfill_job_execute(
    *,
    job: BackfillJob,
    store: VectorStore,
    embedder: Embedder,
    llm: Any,
    prompts: Any = None,
    stop: threading.Event | None = None,
    parallel: int = PARALLEL,
) -> BackfillJob:
    """Run a claimed (running) backfill job to its end. Never raises for the job's own failures; they are
    written to the row. `prompts` is a provider with ``async get(name)`` (the pipeline's), else the registry."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rag-backfill-{job.pk}")
    work = _Backfill(
        job, store=store, embedder=embedder, llm=llm, prompts=prompts, stop=stop, executor=executor, parallel=parallel
    )
    status, error = JobStatus.SUCCEEDED, ""
    try:
        await work.run()
    except JobCancelled:
        status, error = JobStatus.CANCELLED, "cancelled on request; chunks described so far are kept"
    except asyncio.CancelledError:
        status, error = JobStatus.CANCELLED, "stopped: the process running it shut down"
        raise
    except BackfillFailed as exc:
        status, error = JobStatus.FAILED, str(exc)
    except Exception as exc:
        logger.exception("backfill job #%s failed", job.pk)
        status, error = JobStatus.FAILED, f"{type(exc).__name__}: {exc}"
    finally:
        # also on cancellation of this task: the row must not stay "running"
        finishing = asyncio.get_running_loop().run_in_executor(executor, _finish, work, status, error)
        try:
            await asyncio.shield(finishing)
        finally:
            executor.shutdown(wait=False)
    return work.job


def _finish(work: _Backfill, status: str, error: str) -> None:
    try:
        try:
            work.publish()
        except Exception:
            logger.exception("backfill job #%s: refreshing the live index failed", work.job.pk)
        work.tracker.finish(status, error=error, **work.counts())
        work.job.refresh_from_db()
    finally:
        connections.close_all()
