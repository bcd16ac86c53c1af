"""vLLM-like scheduling: max_num_seqs, a waiting queue, batch-dependent latency, aborts freeing slots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import openai
import pytest
from openai import AsyncStream
from openai.types.chat import ChatCompletionChunk

from devtools.simulator.testing import SimulatorProcess, parse_metric
from tests.devtools.simulator.fixtures import make_client
from tests.llm_simulator import simulator_view
from tests.waiting import until_async

MAX_NUM_SEQS = 3


# output_tokens=0: each request's max_tokens sets its length, so tests mix long and short requests.
BUSY_FLAGS = {"max_num_seqs": MAX_NUM_SEQS, "ttft_ms": 40, "tpot_ms": 5, "batch_slowdown": 8, "output_tokens": 0}


@pytest.fixture
def busy_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, BUSY_FLAGS)


@pytest.fixture
async def client(busy_simulator: SimulatorProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    async with make_client(busy_simulator.base_url) as client:
        yield client


async def _open(client: openai.AsyncOpenAI, max_tokens: int) -> AsyncStream[ChatCompletionChunk]:
    return await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "tell me"}], max_tokens=max_tokens, stream=True
    )


async def _drain(stream: AsyncStream[ChatCompletionChunk]) -> int:
    return sum([1 async for chunk in stream if chunk.choices and chunk.choices[0].delta.content])


async def _ttft(client: openai.AsyncOpenAI) -> float:
    start = time.perf_counter()
    stream = await _open(client, max_tokens=2)
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            elapsed = time.perf_counter() - start
            await stream.close()
            return elapsed
    raise AssertionError("no content")


async def _wait_for(sim: SimulatorProcess, *, running: int, waiting: int = 0, within: float = 2.0) -> None:
    """Until /admin/stats shows the given counts; fails after ``within`` seconds."""
    await until_async(sim.astats, lambda stats: (stats["running"], stats["waiting"]) == (running, waiting), within)


async def test_max_num_seqs_is_enforced(client: openai.AsyncOpenAI, busy_simulator: SimulatorProcess) -> None:
    streams = [await _open(client, max_tokens=10) for _ in range(2 * MAX_NUM_SEQS)]
    drains = asyncio.gather(*(_drain(s) for s in streams))
    seen_running: set[float] = set()
    seen_waiting: set[float] = set()
    while not drains.done():
        metrics = await busy_simulator.ametrics()
        seen_running.add(parse_metric(metrics, "vllm:num_requests_running"))
        seen_waiting.add(parse_metric(metrics, "vllm:num_requests_waiting"))
        await asyncio.sleep(0.02)  # the sampling pace of the gauges while the streams drain, not a wait
    assert await drains == [10] * (2 * MAX_NUM_SEQS)
    assert max(seen_running) == MAX_NUM_SEQS
    assert max(seen_waiting) > 0
    assert 'vllm:num_requests_running{model_name="sim-llm"}' in metrics
    stats = await busy_simulator.astats()
    assert stats["completed"] == 2 * MAX_NUM_SEQS and stats["running"] == stats["waiting"] == 0


async def test_ttft_grows_with_the_batch(client: openai.AsyncOpenAI, busy_simulator: SimulatorProcess) -> None:
    solo = min([await _ttft(client) for _ in range(2)])
    background = [await _open(client, max_tokens=500) for _ in range(MAX_NUM_SEQS - 1)]
    await _wait_for(busy_simulator, running=MAX_NUM_SEQS - 1)
    busy = await _ttft(client)  # admitted as the third sequence: prefill x (1 + 8 * 2/3)
    for stream in background:
        await stream.close()
    assert busy > 2.5 * solo, (solo, busy)


async def test_client_abort_frees_slot(client: openai.AsyncOpenAI, busy_simulator: SimulatorProcess) -> None:
    streams = [await _open(client, max_tokens=500) for _ in range(MAX_NUM_SEQS + 1)]
    await _wait_for(busy_simulator, running=MAX_NUM_SEQS, waiting=1)
    for stream in streams:
        await stream.close()
    await _wait_for(busy_simulator, running=0, waiting=0, within=1.0)
    stats = await busy_simulator.astats()
    assert stats["aborted"] == MAX_NUM_SEQS + 1 and stats["completed"] == 0
    assert await busy_simulator.ametric("llm_sim_aborted_total") == MAX_NUM_SEQS + 1
