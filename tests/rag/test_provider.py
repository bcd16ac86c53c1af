"""rag.provider: the modules that serve get the runtime the assembly point handed over, and fail clearly without."""

from __future__ import annotations

import pytest

from rag import provider
from rag.deps import PipelineDeps
from rag.nodes import build_registry
from rag.runtime import PipelineRuntime
from rag.workflows.default import default_workflow
from tests.rag.nodes.support import InMemoryRetriever


def offline_runtime() -> PipelineRuntime:
    return PipelineRuntime(
        registry=build_registry(),
        deps_factory=lambda: PipelineDeps(retriever=InMemoryRetriever()),
        default_workflow=default_workflow(),
    )


def test_without_a_provided_runtime_asking_for_one_says_where_to_provide_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provider, "_getter", None)

    assert not provider.runtime_provided()
    with pytest.raises(provider.RuntimeNotProvided, match="provide_runtime"):
        provider.get_runtime()


def test_the_getter_is_asked_at_each_call_so_a_reset_runtime_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provider, "_getter", None)
    runtimes: list[PipelineRuntime] = [offline_runtime()]
    provider.provide_runtime(lambda: runtimes[-1])

    first = provider.get_runtime()
    runtimes.append(offline_runtime())  # what rag.wiring.reset_runtime() and a later build amount to

    assert first is runtimes[0]
    assert provider.get_runtime() is runtimes[1]
