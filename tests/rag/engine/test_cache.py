import threading

from rag.deps import PipelineDeps
from rag.engine import CompiledGraph, GraphCache, WorkflowDefinition, compile_workflow
from rag.nodes import build_registry
from rag.workflows import DEFAULT_WORKFLOW, default_workflow
from tests.rag.nodes.support import InMemoryRetriever

REGISTRY = build_registry()
DEPS = PipelineDeps(retriever=InMemoryRetriever())


def compiler(calls):
    def compile_fn(definition, key):
        calls.append(key)
        return compile_workflow(definition, registry=REGISTRY, deps=DEPS, fingerprint=key)

    return compile_fn


def variant(max_chars: int) -> WorkflowDefinition:
    data = default_workflow().to_dict()
    data["nodes"][0]["params"] = {"max_chars": max_chars}
    return WorkflowDefinition.from_dict(data)


def test_same_definition_compiles_once():
    cache = GraphCache()
    calls: list[str] = []
    first = cache.get_or_compile(default_workflow(), compiler(calls))
    second = cache.get_or_compile(WorkflowDefinition.from_dict(DEFAULT_WORKFLOW), compiler(calls))
    assert first is second
    assert len(calls) == 1
    assert (cache.hits, cache.misses) == (1, 1)


def test_params_and_compile_time_extras_change_the_key():
    cache = GraphCache()
    calls: list[str] = []
    a = cache.get_or_compile(default_workflow(), compiler(calls))
    b = cache.get_or_compile(variant(100), compiler(calls))
    c = cache.get_or_compile(default_workflow(), compiler(calls), params={"top_k": 3})
    assert len({id(a), id(b), id(c)}) == 3
    assert len(calls) == 3
    assert a.fingerprint != b.fingerprint


def test_least_recently_used_entry_is_evicted():
    cache = GraphCache(max_entries=2)
    calls: list[str] = []
    cache.get_or_compile(variant(1), compiler(calls))
    cache.get_or_compile(variant(2), compiler(calls))
    cache.get_or_compile(variant(1), compiler(calls))  # refreshes 1
    cache.get_or_compile(variant(3), compiler(calls))  # evicts 2
    cache.get_or_compile(variant(1), compiler(calls))
    assert cache.stats()["size"] == 2
    cache.get_or_compile(variant(2), compiler(calls))
    assert len(calls) == 4


def test_clear_and_stats():
    cache = GraphCache()
    calls: list[str] = []
    cache.get_or_compile(default_workflow(), compiler(calls))
    cache.get_or_compile(default_workflow(), compiler(calls))
    stats = cache.stats()
    assert (stats["size"], stats["hits"], stats["misses"], stats["hit_rate"]) == (1, 1, 1, 0.5)
    assert stats["keys"] == [default_workflow().fingerprint()[:12]]
    cache.clear()
    assert cache.stats()["size"] == 0
    cache.get_or_compile(default_workflow(), compiler(calls))
    assert len(calls) == 2


def test_concurrent_callers_get_a_working_graph():
    cache = GraphCache()
    calls: list[str] = []
    results: list[CompiledGraph] = []

    def worker():
        results.append(cache.get_or_compile(default_workflow(), compiler(calls)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert cache.stats()["size"] == 1
    assert cache.hits + cache.misses == 8
