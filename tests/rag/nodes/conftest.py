"""Node tests of the LLM paths run against the vLLM simulator over loopback HTTP, with the real SDK; the
fixtures are the LLM client tests' own (the suite's simulator with this folder's flags, a fresh manager and clients
per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.prompting.prompts import CataloguePrompts
from tests.llm_simulator import simulator_view
from tests.rag.llm.conftest import (  # noqa: F401 - fixtures, used by name
    SIM_FLAGS,
    attempts,
    http_client,
    make_backend,
    manager,
    sim,
)
from tests.rag.nodes.canned_server import CannedLLMServer

# Answers long enough to cite two sources (a sentence is about a dozen tokens).
NODE_SIM_FLAGS = {**SIM_FLAGS, "output_tokens": 40}


@pytest.fixture
def shared_llm_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, NODE_SIM_FLAGS)


@pytest.fixture
def prompts() -> CataloguePrompts:
    return CataloguePrompts()


CannedFactory = Callable[..., Any]


@pytest.fixture
async def canned(manager: LLMConcurrencyManager) -> AsyncIterator[CannedFactory]:  # noqa: F811
    """``backend, server = await canned("reply text")``: an LLMBackend whose server answers only that."""
    servers: list[CannedLLMServer] = []

    async def start(content: str, **policy: Any) -> tuple[LLMBackend, CannedLLMServer]:
        server = await CannedLLMServer(content).__aenter__()
        servers.append(server)
        config = LLMConfig(base_url=server.base_url, api_key="test", chat_model="canned", total_timeout=5.0)
        return LLMBackend(config, CallPolicyConfig(max_attempts=1, **policy)), server

    yield start
    for server in servers:
        await server.__aexit__(None, None, None)
