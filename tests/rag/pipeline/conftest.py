"""The whole default workflow through PipelineRuntime/PipelineRun with an LLM backend pointed at the vLLM
simulator (real SDK over loopback HTTP), retrieving from the demo index in the database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.deps import PipelineConfig, PipelineDeps
from rag.engine import WorkflowDefinition
from rag.events import TERMINAL_CHANNELS, Event
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.nodes import build_registry
from rag.prompting.prompts import CataloguePrompts
from rag.runtime import AskRequest, PipelineRuntime
from rag.workflows.default import default_workflow
from tests.llm_simulator import simulator_view
from tests.rag.llm.conftest import attempts, manager, wait_idle  # noqa: F401 - fixtures, used by name

# The nodes a retrieval question passes through in the default workflow, in order.
RETRIEVAL_PATH = [
    "guard",
    "language_normalizer",
    "curated_lookup",
    "cache_lookup",
    "planner",
    "query_builder",
    "tool_executor",
    "retrieval_checker",
    "response_synth",
    "cache_store",
    "telemetry",
]

# Four reasoning tokens before every answer, answers long enough to cite sources, fast tokens.
PIPELINE_SIM_FLAGS: dict[str, Any] = {
    "ttft_ms": 5,
    "tpot_ms": 2,
    "output_tokens": 40,
    "reasoning_tokens": 4,
    "max_num_seqs": 8,
}


@pytest.fixture
def pipeline_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    """The suite's simulator, reset and configured with the pipeline's flags."""
    return simulator_view(suite_simulator, PIPELINE_SIM_FLAGS)


@pytest.fixture
async def sim(pipeline_simulator: SimulatorProcess) -> AsyncIterator[SimulatorProcess]:
    yield pipeline_simulator
    # Nothing may be left running upstream after a run, whatever ended it.
    await wait_idle(pipeline_simulator)
    assert await pipeline_simulator.ametric("vllm:num_requests_running") == 0


@pytest.fixture(scope="session")
def demo_retriever(demo_index: None, django_db_blocker: Any) -> Iterator[Any]:
    """The suite's demo index (the database store, as a server opens it), its replica loaded once."""
    from rag.retrieval.embedding import LexicalEmbedder
    from rag.retrieval.retriever import StoreRetriever
    from rag.retrieval.store import open_store_from_settings

    with django_db_blocker.unblock():
        store = open_store_from_settings()
        store.sync()
    yield StoreRetriever(store, LexicalEmbedder())
    store.close()


RuntimeFactory = Callable[..., PipelineRuntime]


def _with_params(workflow: WorkflowDefinition, node_params: dict[str, dict[str, Any]]) -> WorkflowDefinition:
    """The workflow with some nodes' params set (``{"response_synth": {"summary_when": "every_turn"}}``)."""
    if not node_params:
        return workflow
    data = workflow.to_dict()
    for node in data["nodes"]:
        node["params"].update(node_params.get(node["id"], {}))
    return WorkflowDefinition.from_dict(data)


@pytest.fixture
def make_runtime(sim: SimulatorProcess, manager: LLMConcurrencyManager, demo_retriever: Any) -> RuntimeFactory:  # noqa: F811
    """``make_runtime(first_token_timeout=1.0, max_attempts=3)``: LLMConfig and CallPolicyConfig fields mixed;
    ``degraded_answers=False`` for a failed answer to end the stream with its error; ``node_params`` sets params
    of the default workflow's nodes."""

    def build(
        *, degraded_answers: bool = True, node_params: dict[str, dict[str, Any]] | None = None, **overrides: Any
    ) -> PipelineRuntime:
        llm_args: dict[str, Any] = {
            "base_url": sim.base_url,
            "api_key": "test",
            "chat_model": "sim-chat",
            "first_token_timeout": 5.0,
            "between_tokens_timeout": 5.0,
            "total_timeout": 20.0,
        }
        policy_args: dict[str, Any] = {"max_attempts": 3, "backoff_base": 0.01, "backoff_max": 0.05, "jitter": False}
        for key, value in overrides.items():
            (llm_args if key in LLMConfig.__dataclass_fields__ else policy_args)[key] = value
        deps = PipelineDeps(
            retriever=demo_retriever,
            config=PipelineConfig(degraded_answers=degraded_answers),
            llm=LLMBackend(LLMConfig(**llm_args), CallPolicyConfig(**policy_args)),
            prompts=CataloguePrompts(),
        )
        return PipelineRuntime(
            registry=build_registry(),
            deps_factory=lambda: deps,
            default_workflow=_with_params(default_workflow(), node_params or {}),
            stream_timeout=60.0,
        )

    return build


async def ask(runtime: PipelineRuntime, question: str, *, backend: str = "chat", **request: Any) -> list[Event]:
    run = await runtime.start(AskRequest(question=question, backend=backend, **request))
    return [event async for event in run.events()]


def check_stream(events: list[Event]) -> Event:
    """What every stream must be: seq 1..n without gaps, one request id, exactly one terminal event, last."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len({e["request_id"] for e in events}) == 1
    assert all(e["source"] == "ask_stream" for e in events)
    terminals = [e for e in events if e["channel"] in TERMINAL_CHANNELS]
    assert len(terminals) == 1 and terminals[0] is events[-1], terminals
    return events[-1]


def usage_total(events: list[Event]) -> dict[str, int]:
    usages = [e["usage"] for e in events if e["channel"] == "meta" and e["stage"] == "usage"]
    return {key: sum(u[key] for u in usages) for key in ("input_tokens", "output_tokens", "total_tokens")}
