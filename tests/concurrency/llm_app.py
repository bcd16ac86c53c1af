"""Fixtures: the whole chat application answering through the LLM simulator, under the process concurrency manager
that the real wiring builds from the settings.

Import the fixtures into a test module (``from tests.concurrency.llm_app import llm_app_fixture, ...``; each is
registered under its name without the suffix). A test
calls ``await llm_app(limit_chat=1, max_waiters=0)`` and gets the manager every LLM call of the app goes through;
the runtime is rebuilt from the settings before and after, so the offline tests around it are unaffected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from concurrency.live import settings_current, settings_forget
from concurrency.manager import LLMConcurrencyManager, get_manager, set_manager
from devtools.simulator.testing import SimulatorProcess
from rag.llm.client import aclose_clients
from rag.wiring import get_runtime, reset_runtime
from tests.llm_simulator import simulator_view
from tests.rag.llm.conftest import wait_idle
from tests.waiting import until_async

# Fast tokens, four reasoning tokens before every answer, answers long enough to cite sources.
APP_SIM_FLAGS: dict[str, Any] = {
    "ttft_ms": 5,
    "tpot_ms": 2,
    "output_tokens": 40,
    "reasoning_tokens": 4,
    "max_num_seqs": 8,
}
# The plan is answered, then the answer streams its four reasoning tokens and four answer tokens and stalls for
# half a minute: long enough that only the client going away can end it within a test.
STALLED_ANSWER = ["ok", "stall:8:30"]
# A client going away must free its chat slot and the upstream request promptly. The bound is the behaviour under
# test, set generous for a loaded machine yet well below the 15 s between-tokens timeout that would free them too.
FREED_WITHIN = 5.0

LLMApp = Callable[..., Awaitable[LLMConcurrencyManager]]


@pytest.fixture(name="app_llm_simulator")
def app_llm_simulator_fixture(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    """The suite's simulator, reset and configured with the app's flags."""
    return simulator_view(suite_simulator, APP_SIM_FLAGS)


@pytest.fixture(name="app_sim")
async def app_sim_fixture(app_llm_simulator: SimulatorProcess) -> AsyncIterator[SimulatorProcess]:
    yield app_llm_simulator
    # Whatever ended a request, nothing may be left generating upstream.
    await wait_idle(app_llm_simulator)


def chat_stats(manager: LLMConcurrencyManager, backend: str = "chat") -> dict[str, Any]:
    return dict(manager.stats()["backends"][backend])


async def wait_slot_and_upstream_free(
    manager: LLMConcurrencyManager, sim: SimulatorProcess, *, within: float = 1.0
) -> dict[str, Any]:
    """The chat backend's stats once no slot is held here and nothing runs upstream; fails after ``within``."""

    async def read() -> tuple[dict[str, Any], dict[str, Any]]:
        return chat_stats(manager), await sim.astats()

    here, _upstream = await until_async(
        read, lambda both: both[0]["in_progress"] == 0 and both[1]["running"] == 0, within=within
    )
    return here


@pytest.fixture(name="llm_app")
async def llm_app_fixture(app_sim: SimulatorProcess, settings: Any) -> AsyncIterator[LLMApp]:
    """``await llm_app(limit_chat=1, max_waiters=0, acquire_timeout=...)``: the app with `LLM_BASE_URL` at the
    simulator and a fresh process manager configured by the wiring from the `LLM_*` settings."""
    built: list[LLMConcurrencyManager] = []

    async def build(
        *, limit_chat: int = 8, max_waiters: int = 200, acquire_timeout: float = 30.0
    ) -> LLMConcurrencyManager:
        settings.LLM_BASE_URL = app_sim.base_url
        settings.LLM_MAX_CONCURRENT_CHAT = limit_chat
        settings.LLM_MAX_WAITERS = max_waiters
        settings.LLM_ACQUIRE_TIMEOUT = acquire_timeout
        if settings_current() is not None:
            settings_forget()  # an applied settings row would win over the settings above
        reset_runtime()
        set_manager(None)
        await asyncio.to_thread(get_runtime().preload)  # the wiring configures the process manager here
        manager = get_manager()
        assert manager.limit("chat") == limit_chat and manager.max_waiters == max_waiters
        built.append(manager)
        return manager

    yield build
    reset_runtime()
    set_manager(None)
    await aclose_clients()
    for manager in built:
        for name, stats in manager.stats()["backends"].items():
            assert stats["in_progress"] == 0, f"slot of {name} not released"
