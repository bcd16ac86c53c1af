"""Backfill against the LLM simulator (the real OpenAI SDK over loopback): descriptions stored and searchable,
resumable, cancellable, and nothing changed without an LLM."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command

from concurrency.manager import LLMConcurrencyManager, reset_manager, set_manager
from devtools.simulator.testing import SimulatorProcess
from rag.documents.backfill import FAILURE_STREAK_LIMIT, backfill_job_execute
from rag.documents.indexing import index_job_execute
from rag.documents.models import BackfillJob, Chunk, JobStatus
from rag.documents.services import backfill_job_create, index_job_create, job_claim
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.llm.client import aclose_clients
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import live_payloads
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore
from tests.llm_simulator import simulator_view
from tests.rag.documents.conftest import CountingEmbedder

pytestmark = pytest.mark.django_db(transaction=True)
QUERY = "describe the chunk as json"


@pytest.fixture
def simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, {"ttft_ms": 2, "tpot_ms": 1, "output_tokens": 16, "max_num_seqs": 8})


def sim_backend(simulator: SimulatorProcess, *, max_attempts: int = 1) -> LLMBackend:
    config = LLMConfig(
        base_url=simulator.base_url,
        api_key="test",
        chat_model="sim-chat",
        first_token_timeout=5.0,
        between_tokens_timeout=5.0,
        total_timeout=20.0,
    )
    policy = CallPolicyConfig(max_attempts=max_attempts, backoff_base=0.01, backoff_max=0.02, jitter=False)
    return LLMBackend(config, policy)


@pytest.fixture
def manager() -> Iterator[LLMConcurrencyManager]:
    """The process's concurrency manager for the test: the one every LLM call takes its slot from."""
    installed = LLMConcurrencyManager({"default": 4, "chat": 4, "responses": 4, "embedding": 4}, acquire_timeout=5.0)
    set_manager(installed)
    yield installed
    set_manager(None)


@pytest.fixture
async def llm(simulator: SimulatorProcess, manager: LLMConcurrencyManager) -> AsyncIterator[LLMBackend]:
    yield sim_backend(simulator)
    await aclose_clients()


@pytest.fixture
def indexed(store: VectorStore, embedder: CountingEmbedder) -> int:
    job = index_job_create()
    job_claim(job=job, runner="test:1")
    job = index_job_execute(job=job, store=store, embedder=embedder)
    assert job.status == JobStatus.SUCCEEDED
    return Chunk.objects.count()


async def backfill(store: VectorStore, embedder: Any, llm: Any, *, limit: int | None = None, **options: Any) -> Any:
    job = await sync_to_async(backfill_job_create)(limit=limit)
    assert await sync_to_async(job_claim)(job=job, runner="test:1")
    return await backfill_job_execute(job=job, store=store, embedder=embedder, llm=llm, **options)


def described() -> dict[str, tuple[str, str]]:
    rows = Chunk.objects.filter(described_at__isnull=False).values_list("chunk_id", "description_zh", "description_en")
    return {chunk_id: (zh, en) for chunk_id, zh, en in rows}


async def completions(simulator: SimulatorProcess) -> int:
    stats = await simulator.astats()
    return int(stats["completed"])


async def test_descriptions_are_stored_searchable_and_a_second_run_resumes(
    store: VectorStore, embedder: CountingEmbedder, llm: LLMBackend, simulator: SimulatorProcess, indexed: int
) -> None:
    query = BM25Encoder().encode_query(QUERY)
    assert store.search(None, query, limit=5) == []  # no chunk speaks of JSON before

    first = await backfill(store, embedder, llm, limit=3)
    assert (first.status, first.updated, first.progress_done, first.progress_total) == (JobStatus.SUCCEEDED, 3, 3, 3)
    done = await sync_to_async(described)()
    assert len(done) == 3 and all(zh and en for zh, en in done.values())

    second = await backfill(store, embedder, llm)
    assert second.status == JobStatus.SUCCEEDED, second.error
    assert (second.updated, second.unchanged) == (indexed - 3, 3)
    assert await completions(simulator) == indexed  # every chunk described exactly once
    done = await sync_to_async(described)()
    assert len(done) == indexed

    # the descriptions are text of their chunk now: in the payload and found by search
    rows = await sync_to_async(lambda: list(Chunk.objects.values_list("point_id", "chunk_id")))()
    payloads = await asyncio.to_thread(live_payloads, store, [point for point, _ in rows])
    for point, chunk_id in rows:
        assert (payloads[point]["description_zh"], payloads[point]["description_en"]) == done[chunk_id]
    hits = store.search(None, query, limit=50)
    assert {h.payload["language"] for h in hits} == {"zh-hant", "en"}
    assert len(hits) == indexed

    third = await backfill(store, embedder, llm)
    assert (third.status, third.updated, third.unchanged) == (JobStatus.SUCCEEDED, 0, indexed)
    assert "nothing to do" in third.log


async def test_every_call_takes_a_concurrency_slot_and_a_429_is_retried_not_a_failed_chunk(
    store: VectorStore,
    embedder: CountingEmbedder,
    llm: LLMBackend,
    manager: LLMConcurrencyManager,
    simulator: SimulatorProcess,
    indexed: int,
) -> None:
    await simulator.afaults(fail_next=["429"], retry_after=0)
    job = await backfill(store, embedder, sim_backend(simulator, max_attempts=3), limit=3, parallel=1)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.updated, job.failed) == (3, 0)
    assert "failed " not in job.log
    assert len(await sync_to_async(described)()) == 3
    stats = await simulator.astats()
    attempts = int(stats["endpoints"]["chat"]["attempts"])
    assert attempts == 4  # three chunks, one of them asked twice: the call policy retried the 429
    assert int(stats["completed"]) == 3
    # each attempt, the retry included, held a slot of the chat backend's limit
    chat = manager.stats()["backends"]["chat"]
    assert chat["total_acquired"] == attempts
    assert chat["total_released"] == attempts and chat["in_progress"] == 0


class StopAfter:
    """The backend, setting `stop` (what a cancel request does) once `calls` completions have started."""

    def __init__(self, llm: LLMBackend, stop: threading.Event, calls: int) -> None:
        self.llm, self.stop, self.calls = llm, stop, calls
        self.config = llm.config

    async def complete(self, **kwargs: Any) -> Any:
        self.calls -= 1
        if self.calls <= 0:
            self.stop.set()
        return await self.llm.complete(**kwargs)


async def test_a_cancelled_backfill_keeps_what_it_described_and_the_next_one_does_the_rest(
    store: VectorStore, embedder: CountingEmbedder, llm: LLMBackend, simulator: SimulatorProcess, indexed: int
) -> None:
    stop = threading.Event()
    job = await backfill(store, embedder, StopAfter(llm, stop, calls=2), stop=stop, parallel=2)
    assert job.status == JobStatus.CANCELLED and "kept" in job.error
    assert job.updated == 2 and len(await sync_to_async(described)()) == 2
    assert await completions(simulator) == 2  # stopped between batches: no call was started after the cancel

    rest = await backfill(store, embedder, llm)
    assert rest.updated == indexed - 2
    assert await completions(simulator) == indexed


async def test_the_llm_failing_again_and_again_ends_the_job(
    store: VectorStore, embedder: CountingEmbedder, llm: LLMBackend, simulator: SimulatorProcess, indexed: int
) -> None:
    await simulator.afaults(fail_next=["500"] * (FAILURE_STREAK_LIMIT + 2))
    job = await backfill(store, embedder, llm, parallel=1)
    assert job.status == JobStatus.FAILED
    assert f"failed {FAILURE_STREAK_LIMIT} times in a row" in job.error
    assert (job.failed, job.updated) == (FAILURE_STREAK_LIMIT, 0)
    assert job.log.count("failed ") >= FAILURE_STREAK_LIMIT
    assert await sync_to_async(described)() == {}


async def test_without_an_llm_a_backfill_job_changes_nothing(
    store: VectorStore, embedder: CountingEmbedder, indexed: int
) -> None:
    live = await asyncio.to_thread(store.live_collection)
    job = await backfill(store, embedder, None)
    assert job.status == JobStatus.FAILED and "no LLM is configured" in job.error
    assert await sync_to_async(described)() == {}
    assert await asyncio.to_thread(store.live_collection) == live
    assert embedder.calls == 1  # only the index job embedded


def test_the_backfill_command_runs_in_process_through_the_configured_llm(
    configured: Path, settings: Any, simulator: SimulatorProcess
) -> None:
    call_command("reindex", stdout=StringIO())  # with the embedder the commands use
    settings.LLM_BASE_URL = simulator.base_url
    settings.LLM_CHAT_MODEL = "sim-chat"
    out = StringIO()
    try:
        call_command("backfill", "--limit", "4", stdout=out, stderr=StringIO())
    finally:
        reset_manager()
    assert "backfill job #" in out.getvalue() and "100%" in out.getvalue()
    assert "Described 4 chunks" in out.getvalue()
    assert len(described()) == 4
    assert BackfillJob.objects.get().created_from == "command"
    assert int(simulator.stats()["completed"]) == 4


async def test_a_backfill_into_an_index_of_another_embedder_fails_before_calling_the_llm(
    store: VectorStore, llm: LLMBackend, simulator: SimulatorProcess, indexed: int
) -> None:
    job = await backfill(store, CountingEmbedder(inner=LexicalEmbedder(dim=128)), llm)
    assert job.status == JobStatus.FAILED and "reindex --full" in job.error
    assert await completions(simulator) == 0
