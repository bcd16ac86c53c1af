"""The semantic cache knows which model wrote an answer: a change of model is a miss, and the old one's answers go.

The whole default workflow against the simulator (real SDK over loopback HTTP), once answering as "sim-a" and then,
as after a change of `LLM_CHAT_MODEL`, as "sim-b", with one cache in the database between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.deps import PipelineConfig, PipelineDeps
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.nodes import build_registry
from rag.prompting.prompts import CataloguePrompts
from rag.runtime import PipelineRuntime
from rag.semcache.cache import SemanticCache, build_semantic_cache
from rag.semcache.models import CacheEntry
from rag.workflows.default import default_workflow
from tests.rag.pipeline.conftest import ask, check_stream

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How do I reset my password?"


@pytest.fixture
def cache(demo_retriever: Any) -> Iterator[SemanticCache]:
    # built off the event loop, as the product builds it (it reads the database)
    with ThreadPoolExecutor(max_workers=1) as thread:
        built = thread.submit(
            build_semantic_cache, demo_retriever.store, demo_retriever.embedder, index_version_ttl=0.0
        ).result()
    yield built
    built.close()


def runtime_answering_as(model: str, *, sim: SimulatorProcess, retriever: Any, cache: SemanticCache) -> PipelineRuntime:
    llm = LLMBackend(
        LLMConfig(base_url=sim.base_url, api_key="test", chat_model=model, total_timeout=20.0),
        CallPolicyConfig(max_attempts=2, backoff_base=0.01, backoff_max=0.05, jitter=False),
    )
    deps = PipelineDeps(retriever=retriever, config=PipelineConfig(), llm=llm, prompts=CataloguePrompts(), cache=cache)
    return PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())


async def answer(runtime: PipelineRuntime, cache: SemanticCache) -> dict[str, Any]:
    terminal = check_stream(await ask(runtime, QUESTION))
    assert terminal["channel"] == "meta_summary", terminal
    assert await asyncio.to_thread(cache.wait_idle)
    return terminal


async def test_a_new_model_misses_the_old_models_answers_and_the_purge_deletes_them(
    sim: SimulatorProcess, manager: LLMConcurrencyManager, demo_retriever: Any, cache: SemanticCache
) -> None:
    model_a = runtime_answering_as("sim-a", sim=sim, retriever=demo_retriever, cache=cache)
    assert (await answer(model_a, cache))["cached"] is False
    assert (await answer(model_a, cache))["cached"] is True  # the same model: served from the cache
    producers = [p async for p in CacheEntry.objects.values_list("producer", flat=True)]
    assert len(producers) == 1 and "/sim-a/" in producers[0]

    model_b = runtime_answering_as("sim-b", sim=sim, retriever=demo_retriever, cache=cache)
    assert (await answer(model_b, cache))["cached"] is False  # another model wrote the stored answer: a miss
    assert (await answer(model_b, cache))["cached"] is True
    assert await CacheEntry.objects.acount() == 2

    # the runtime that built its dependencies last is what is configured now: sim-a's answer is purged
    assert await asyncio.to_thread(cache.purge) == 1
    assert [p async for p in CacheEntry.objects.values_list("producer", flat=True)] == [
        p for p in (await asyncio.to_thread(model_b.producers) or ()) if p.startswith("chat/")
    ]
