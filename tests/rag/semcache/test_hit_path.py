"""A cache hit does only what a cached answer needs: no planner, no retrieval, no LLM call; its answer goes out in
a few large deltas."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.deps import PipelineDeps
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.nodes import build_registry
from rag.prompting.prompts import CataloguePrompts
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.retriever import StoreRetriever
from rag.runtime import AskRequest, PipelineRuntime
from rag.semcache.cache import SemanticCache
from rag.workflows.default import default_workflow
from tests.rag.llm.conftest import manager, shared_llm_simulator, sim  # noqa: F401 - fixtures, used by name
from tests.rag.nodes.support import answer_text

pytestmark = pytest.mark.django_db(transaction=True)


class CountingRetriever(StoreRetriever):
    """The real retriever, counting its searches."""

    searches = 0

    async def search_report(self, *args: Any, **kwargs: Any) -> Any:  # what `search` and the tool executor call
        self.searches += 1
        return await super().search_report(*args, **kwargs)


async def test_a_hit_runs_no_planner_retrieval_or_llm_call(
    semantic_cache: SemanticCache,
    store: Any,
    sim: SimulatorProcess,  # noqa: F811
    manager: LLMConcurrencyManager,  # noqa: F811
) -> None:
    retriever = CountingRetriever(store, LexicalEmbedder())
    llm = LLMBackend(
        LLMConfig(base_url=sim.base_url, api_key="test", chat_model="sim-chat", total_timeout=20.0),
        CallPolicyConfig(backoff_base=0.01, backoff_max=0.05, jitter=False),
    )
    deps = PipelineDeps(retriever=retriever, cache=semantic_cache, llm=llm, prompts=CataloguePrompts())
    runtime = PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())

    async def ask(question: str) -> list[dict[str, Any]]:
        run = await runtime.start(AskRequest(question=question, backend="chat"))
        return [event async for event in run.events()]

    first = await ask("How do I reset my password?")
    assert first[-1]["channel"] == "meta_summary" and first[-1]["cached"] is False
    assert await asyncio.to_thread(semantic_cache.wait_idle)
    assert semantic_cache.stats()["stores"] == 1, "the first answer was not cached"
    searches, attempts = retriever.searches, (await sim.astats())["attempts"]
    assert searches > 0 and attempts > 0  # the miss did plan, retrieve and call the model

    second = await ask("How do I reset my password?")

    summary = second[-1]
    assert summary["channel"] == "meta_summary" and summary["cached"] is True
    assert retriever.searches == searches  # no retrieval
    assert (await sim.astats())["attempts"] == attempts  # no LLM call of any kind
    assert manager.stats()["backends"]["chat"]["total_acquired"] == attempts  # nor a slot taken
    nodes = {event["node"] for event in second}
    assert nodes.isdisjoint({"planner", "query_builder", "tool_executor", "retrieval_checker", "response_synth"})
    deltas = [e["delta"] for e in second if e["channel"] == "answer"]
    assert answer_text(second) == answer_text(first)
    assert len(deltas) <= len(answer_text(second)) // 240 + 1  # a few large deltas, not one per few characters
