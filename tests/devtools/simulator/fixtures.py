"""Reusable simulator fixtures; another test folder's conftest.py imports the ones it needs by name
(``from tests.devtools.simulator.fixtures import simulator, simulator_factory, shared_simulator``).

``simulator_factory(**flags)`` starts simulators of their own (stopped at session end), for tests of start-up
flags and of stopping; ``simulator`` is the suite's simulator (``tests.llm_simulator``) reset and configured with
FAST_FLAGS before each test and checked idle after it; ``llm_client`` is a strict, no-retry ``openai.AsyncOpenAI``
pointed at it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import openai
import pytest

from devtools.simulator.testing import SimulatorProcess
from tests.llm_simulator import simulator_view
from tests.waiting import wait_for

# Fast enough that a test with a few requests takes milliseconds, slow enough to stay ordered.
FAST_FLAGS: dict[str, Any] = {"ttft_ms": 5, "tpot_ms": 1, "output_tokens": 12, "max_num_seqs": 8}

SimulatorFactory = Callable[..., SimulatorProcess]


def make_client(base_url: str, **kwargs: Any) -> openai.AsyncOpenAI:
    """The real SDK, no retries, and strict response validation so a wrong field shape fails the test."""
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, _strict_response_validation=True, **kwargs)


def wait_idle_blocking(sim: SimulatorProcess, within: float = 1.0) -> dict[str, Any]:
    """The simulator's stats once nothing runs or waits; fails if that takes longer than ``within``.

    For sync code (a fixture's teardown, a sync test); async tests have tests.rag.llm.conftest.wait_idle.
    """
    return wait_for(sim.stats, lambda stats: stats["running"] == stats["waiting"] == 0, within=within)


@pytest.fixture(scope="session")
def simulator_factory() -> Iterator[SimulatorFactory]:
    """``simulator_factory(**flags)`` starts a simulator subprocess, stopped at the end of the session."""
    started: list[SimulatorProcess] = []

    def start(**flags: Any) -> SimulatorProcess:
        process = SimulatorProcess().start(**flags)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def shared_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    """The suite's simulator, reset and configured with FAST_FLAGS."""
    return simulator_view(suite_simulator, FAST_FLAGS)


@pytest.fixture
def simulator(shared_simulator: SimulatorProcess) -> Iterator[SimulatorProcess]:
    """The suite's simulator, fast, with counters and faults reset for this test."""
    yield shared_simulator
    # Every test must leave no request running upstream (a leaked stream is a leaked GPU sequence).
    wait_idle_blocking(shared_simulator)


@pytest.fixture
def llm_base_url(simulator: SimulatorProcess) -> str:
    return simulator.base_url


@pytest.fixture
async def llm_client(simulator: SimulatorProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    client = make_client(simulator.base_url)
    yield client
    await client.close()
