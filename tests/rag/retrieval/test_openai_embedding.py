"""Retrieval with an OpenAI-compatible embeddings server: our simulator over real HTTP (/v1/embeddings), at index
time (the reindex command, a job run on a worker thread as the server runs it) and at query time, always through
the call policy and the concurrency manager's `embedding` slots."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from concurrency.manager import LLMConcurrencyManager, set_manager
from devtools.simulator.testing import SimulatorProcess
from rag.documents.indexing import index_job_execute
from rag.documents.models import IndexJob, JobStatus
from rag.documents.services import index_job_create, job_claim
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig, OpenAIEmbedder
from rag.llm.client import aclose_clients
from rag.retrieval.embedding import LexicalEmbedder, aembed_query
from rag.retrieval.indexer import build_compatible
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.sparse import BM25Encoder
from rag.retrieval.store import VectorStore, open_store_from_settings
from tests.llm_simulator import simulator_view
from tests.rag.retrieval.conftest import write_corpus

DIM = 32
SPACE = f"openai-sim-embedding-d{DIM}"


@pytest.fixture
def sim(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, {"embedding_dim": DIM, "ttft_ms": 1, "tpot_ms": 1})


@pytest.fixture
def manager() -> Iterator[LLMConcurrencyManager]:
    m = LLMConcurrencyManager({"default": 4, "chat": 4, "responses": 4, "embedding": 2}, acquire_timeout=5.0)
    set_manager(m)
    yield m
    set_manager(None)
    for name, stats in m.stats()["backends"].items():
        assert stats["in_progress"] == 0, f"slot of {name} not released"


def embeddings_attempts(sim: SimulatorProcess) -> int:
    return int(sim.stats()["endpoints"]["embeddings"]["attempts"])


def backend(sim: SimulatorProcess, **policy: Any) -> LLMBackend:
    config = LLMConfig(
        base_url="",
        embedding_base_url=sim.base_url,
        embedding_model="sim-embedding",
        embedding_dim=DIM,
        embedding_batch_size=3,
        total_timeout=20.0,
    )
    return LLMBackend(config, CallPolicyConfig(backoff_base=0.01, backoff_max=0.05, jitter=False, **policy))


# --- the reindex command ----------------------------------------------------------------------------------------


@pytest.fixture
def configured(
    settings: Any, tmp_path: Path, sim: SimulatorProcess, manager: LLMConcurrencyManager, private_index: str
) -> Path:
    settings.CORPUS_DIR = write_corpus(tmp_path / "corpus")
    settings.ASK_SERVER_URL = "http://127.0.0.1:9"
    settings.EMBEDDING_BASE_URL = sim.base_url
    settings.EMBEDDING_MODEL = "sim-embedding"
    settings.EMBEDDING_DIM = DIM
    settings.EMBEDDING_BATCH_SIZE = 4
    settings.LLM_RETRY_MAX_ATTEMPTS = 2
    settings.LLM_RETRY_BASE_SECONDS = 0.01
    settings.LLM_RETRY_MAX_SECONDS = 0.05
    # The gate under test is this process's manager; with Redis the cluster's (tested on its own) would replace it.
    settings.LLM_CLUSTER_LIMITS = False
    return tmp_path


def reindex(*args: str) -> str:
    out = StringIO()
    call_command("reindex", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def open_store(root: Path) -> VectorStore:
    return open_store_from_settings()


@pytest.mark.django_db(transaction=True)
def test_reindex_embeds_in_batches_through_the_gate_and_queries_search_the_same_space(
    configured: Path, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    out = reindex()
    assert "Indexed 5 documents into" in out, out
    chunks = int(out.split(" documents into ")[1].split(" chunks")[0])
    requests = math.ceil(chunks / 4)
    assert embeddings_attempts(sim) == requests  # one request per batch of EMBEDDING_BATCH_SIZE texts
    assert manager.stats()["backends"]["embedding"]["total_acquired"] == requests
    assert all(len(r["body"]["input"]) <= 4 for r in sim.requests())
    with open_store(configured) as store:
        assert store.metadata()["embedder"] == SPACE and store.metadata()["dim"] == DIM
        assert store.count() == chunks

        async def ask() -> list[str]:
            # the pipeline's retriever: the query is embedded over HTTP on this loop, then searched
            retriever = StoreRetriever(store, OpenAIEmbedder(backend(sim)), mode="dense")
            try:
                return [chunk.doc_id for chunk in await retriever.search("reset password forgot", limit=3)]
            finally:
                await aclose_clients()

        found = asyncio.run(ask())
    assert found[0].endswith("password-reset")
    assert embeddings_attempts(sim) == requests + 1
    assert manager.stats()["backends"]["embedding"]["total_acquired"] == requests + 1


@pytest.mark.django_db(transaction=True)
def test_an_index_of_another_space_is_re_embedded_whole(configured: Path, settings: Any, sim: SimulatorProcess) -> None:
    settings.EMBEDDING_BASE_URL = ""
    out = reindex()
    assert "Indexed 5 documents" in out
    settings.EMBEDDING_BASE_URL = sim.base_url
    out = reindex()  # incremental, nothing changed: but the live build is lexical, so nothing can be reused
    assert "Documents: 0 added, 0 updated, 5 unchanged" in out
    assert "0 reused from the previous build" in out
    with open_store(configured) as store:
        assert store.metadata()["embedder"] == SPACE
        chunks = store.count()
    assert f"Chunks: {chunks} embedded" in out
    before = embeddings_attempts(sim)
    out = reindex()  # same space now: everything is copied, nothing sent to the server
    assert f"{chunks} reused from the previous build" in out and embeddings_attempts(sim) == before


@pytest.mark.django_db(transaction=True)
def test_a_failing_embedding_server_names_the_endpoint_and_leaves_the_live_index(
    configured: Path, sim: SimulatorProcess
) -> None:
    reindex()
    with open_store(configured) as store:
        live, count = store.live_collection(), store.count()
        collections_before = set(store.builds())
    # the second batch fails twice: the policy's two attempts are spent
    sim.faults(endpoints=["embeddings"], fail_next=["ok", "500", "500"])
    with pytest.raises(CommandError) as info:
        reindex("--full")
    message = str(info.value)
    assert f"embedding server {sim.base_url}/embeddings (model sim-embedding" in message
    assert "failed" in message and "the live index is unchanged" in message
    job = IndexJob.objects.latest("pk")
    assert job.status == JobStatus.FAILED and sim.base_url in job.error
    with open_store(configured) as store:
        assert (store.live_collection(), store.count()) == (live, count)
        # the build made aside was dropped
        assert set(store.builds()) == collections_before


@pytest.mark.django_db(transaction=True)
def test_reindex_refuses_a_missing_model_folder_before_creating_a_job(configured: Path, settings: Any) -> None:
    settings.EMBEDDING_BASE_URL = ""
    settings.SENTENCE_TRANSFORMERS_MODEL = str(configured / "no-such-model")
    with pytest.raises(CommandError, match="SENTENCE_TRANSFORMERS_MODEL: no such folder"):
        reindex()
    assert not IndexJob.objects.exists()


# --- as the server runs a job: indexing on a worker thread, embedding on the serving loop -----------------------


@pytest.fixture
async def loop_manager() -> AsyncIterator[LLMConcurrencyManager]:
    m = LLMConcurrencyManager({"default": 4, "chat": 4, "responses": 4, "embedding": 2}, acquire_timeout=5.0)
    set_manager(m)
    yield m
    set_manager(None)
    await aclose_clients()
    assert m.stats()["backends"]["embedding"]["in_progress"] == 0


@pytest.mark.django_db(transaction=True)
async def test_a_job_on_a_worker_thread_embeds_on_the_serving_loop(
    configured: Path, sim: SimulatorProcess, loop_manager: LLMConcurrencyManager
) -> None:
    loop = asyncio.get_running_loop()
    embedder = OpenAIEmbedder(backend(sim), home_loop=lambda: loop)
    # a slot held on this loop: a call made on any other loop would be refused by the manager, so the job
    # succeeding proves its calls ran here, under these slots
    async with loop_manager.acquire("embedding"):
        job = await asyncio.to_thread(index_job_create, created_from="api")
        assert await asyncio.to_thread(job_claim, job=job, runner="test")

        def run() -> IndexJob:
            with open_store(configured) as store:
                return index_job_execute(job=job, store=store, embedder=embedder)

        finished = await asyncio.to_thread(run)
    assert finished.status == JobStatus.SUCCEEDED, finished.error
    assert finished.chunks_embedded == finished.chunks > 0
    assert loop_manager.stats()["backends"]["embedding"]["total_acquired"] == math.ceil(finished.chunks / 3) + 1


# --- query time ---------------------------------------------------------------------------------------------------


async def test_query_embedding_is_awaited_on_the_loop(
    tmp_path: Path, sim: SimulatorProcess, loop_manager: LLMConcurrencyManager
) -> None:
    from rag.retrieval.indexer import build_index
    from rag.retrieval.markdown import load_markdown_dir

    indexing = OpenAIEmbedder(backend(sim))
    documents = load_markdown_dir(write_corpus(tmp_path / "corpus"))
    with VectorStore.open("helpcentre", path=tmp_path / "qdrant") as store:  # a store of its own, no database
        indexing.bind_loop(asyncio.get_running_loop())
        await asyncio.to_thread(build_index, documents, store, indexing)
        # a fresh embedder knows no loop: its sync path from a thread would run a private loop
        embedder = OpenAIEmbedder(backend(sim))
        retriever = StoreRetriever(store, embedder, mode="hybrid_rrf")
        async with loop_manager.acquire("embedding"):
            # one slot of two is held here: a search embedding on a thread's private loop would be refused
            chunks = await retriever.search("How do I reset my password?", limit=3, language="en")
        assert chunks[0].doc_id.endswith("password-reset")
        assert await aembed_query(embedder, "reset") == await embedder.aembed_query("reset")


async def test_a_server_failure_at_query_time_keeps_its_class_and_names_the_endpoint(
    sim: SimulatorProcess, loop_manager: LLMConcurrencyManager
) -> None:
    from rag.errors import UpstreamError

    await sim.afaults(endpoints=["embeddings"], fail_next=["500"])
    embedder = OpenAIEmbedder(backend(sim, max_attempts=1))
    with pytest.raises(UpstreamError, match=f"embedding server {sim.base_url}/embeddings .* failed"):
        await embedder.aembed_query("reset password")


def test_build_compatible_tells_vector_spaces_apart(sim: SimulatorProcess) -> None:
    lexical = LexicalEmbedder()
    network = OpenAIEmbedder(backend(sim))
    encoder = BM25Encoder()
    metadata: dict[str, Any] = {
        "schema": 1,
        "embedder": lexical.name,
        "dim": lexical.dim,
        "bm25": {"tokenizer": "", "k1": encoder.params.k1, "b": encoder.params.b},
    }
    from rag.retrieval.sparse import TOKENIZER_NAME

    metadata["bm25"]["tokenizer"] = TOKENIZER_NAME
    assert build_compatible(metadata, lexical, encoder)
    assert not build_compatible(metadata, network, encoder)
    assert build_compatible({**metadata, "embedder": network.name, "dim": network.dim}, network, encoder)
