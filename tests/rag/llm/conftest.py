"""Fixtures for the LLM client tests: the suite's simulator configured for the folder, a fresh concurrency manager
and fresh HTTP clients per test, and a record of the policy's attempts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager, set_manager
from devtools.simulator.testing import SimulatorProcess
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig
from rag.llm.client import aclose_clients
from rag.llm.config import HTTP_CLIENTS, HttpClient
from rag.llm.policy import CallPolicy
from tests.llm_simulator import simulator_view
from tests.waiting import until_async, wait_for

# Fast tokens, a little reasoning before every answer (so both channels are exercised), small vectors.
SIM_FLAGS: dict[str, Any] = {
    "ttft_ms": 5,
    "tpot_ms": 2,
    "output_tokens": 12,
    "reasoning_tokens": 4,
    "max_num_seqs": 8,
    "embedding_dim": 32,
}
USER = [{"role": "user", "content": "How do I reset my password?"}]


@pytest.fixture
def shared_llm_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    """The suite's simulator, reset and configured with this folder's flags."""
    return simulator_view(suite_simulator, SIM_FLAGS)


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose listener never accepts and whose accept queue is full: the kernel drops new SYNs, so a
    connect there hangs until the client's connect timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        fillers = []
        try:
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
                fillers.append(filler)
            # the accept queue is full once a handshake completed (with a backlog of 0 it holds one connection):
            # the listener is then readable
            wait_for(lambda: select.select([listener], [], [], 0)[0])
            yield port
        finally:
            for filler in fillers:
                filler.close()


async def wait_idle(sim: SimulatorProcess, within: float = 1.0) -> dict[str, Any]:
    """The simulator's stats once nothing runs or waits; fails if that takes longer than ``within``."""
    return await until_async(sim.astats, lambda stats: stats["running"] == stats["waiting"] == 0, within=within)


@pytest.fixture
async def sim(shared_llm_simulator: SimulatorProcess) -> AsyncIterator[SimulatorProcess]:
    yield shared_llm_simulator
    # Every test must leave no request running upstream (a leaked stream is a leaked GPU sequence).
    await wait_idle(shared_llm_simulator)


@pytest.fixture
async def manager() -> AsyncIterator[LLMConcurrencyManager]:
    m = LLMConcurrencyManager({"default": 4, "chat": 4, "responses": 4, "embedding": 4}, acquire_timeout=5.0)
    set_manager(m)
    yield m
    set_manager(None)
    await aclose_clients()
    for name, stats in m.stats()["backends"].items():
        assert stats["in_progress"] == 0, f"slot of {name} not released"


class AttemptLog(logging.Handler):
    """Collects the policy's ``llm attempt`` log records."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("llm attempt"):
            self.records.append(record)

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def outcomes(self) -> list[str]:
        return [str(r.args[6]) for r in self.records]  # type: ignore[index]


@pytest.fixture
def attempts() -> Iterator[AttemptLog]:
    logger = logging.getLogger("rag.llm.policy")
    handler = AttemptLog()
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


class VirtualTime:
    """The clock and sleep a CallPolicy is given in tests: the clock runs with real time plus every sleep taken
    on it, and a sleep records its seconds and returns after one real turn of the event loop. Upstream calls
    still take their real time; backoff, Retry-After and RPM waits are recorded instead of waited."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self._skipped = 0.0

    def clock(self) -> float:
        return time.monotonic() + self._skipped

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._skipped += seconds
        await asyncio.sleep(0)


@pytest.fixture
def virtual_time() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def http_client() -> HttpClient:
    """The HTTP stack of the clients `make_backend` builds; the transport tests run on each (`on_each_http_client`)."""
    return "aiohttp"


# Runs a test once per HTTP stack (LLM_HTTP_CLIENT): a transport failure must reach the policy as the same error.
on_each_http_client = pytest.mark.parametrize("http_client", HTTP_CLIENTS)

BackendFactory = Callable[..., LLMBackend]


@pytest.fixture
def make_backend(sim: SimulatorProcess, manager: LLMConcurrencyManager, http_client: HttpClient) -> BackendFactory:
    """``make_backend(first_token_timeout=1, max_attempts=3, ...)``: LLMConfig and CallPolicyConfig fields mixed;
    ``time=VirtualTime()`` gives the policy that clock and sleep instead of the real ones. The clients use the
    ``http_client`` fixture's HTTP stack."""

    def build(time: VirtualTime | None = None, **overrides: Any) -> LLMBackend:
        llm_fields = set(LLMConfig.__dataclass_fields__)
        llm_args: dict[str, Any] = {
            "base_url": sim.base_url,
            "api_key": "test",
            "chat_model": "sim-chat",
            "first_token_timeout": 5.0,
            "between_tokens_timeout": 5.0,
            "total_timeout": 20.0,
            "embedding_dim": SIM_FLAGS["embedding_dim"],
            "http_client": http_client,
        }
        policy_args: dict[str, Any] = {"backoff_base": 0.01, "backoff_max": 0.05, "jitter": False}
        for key, value in overrides.items():
            (llm_args if key in llm_fields else policy_args)[key] = value
        policy_config = CallPolicyConfig(**policy_args)
        if time is None:
            return LLMBackend(LLMConfig(**llm_args), policy_config)
        policy = CallPolicy(policy_config, clock=time.clock, sleep=time.sleep)
        return LLMBackend(LLMConfig(**llm_args), policy=policy)

    return build
