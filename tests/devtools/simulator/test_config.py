"""The configuration changed at run time (``/admin/config``), as a client of the running simulator sees it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from devtools.simulator import SimulatorConfig
from devtools.simulator.testing import SimulatorProcess
from tests.devtools.simulator.fixtures import FAST_FLAGS
from tests.waiting import until_async

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "tell me about the simulator"}]


async def _content_tokens(client: openai.AsyncOpenAI, **kwargs: Any) -> int:
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True, **kwargs)
    return sum([1 async for c in stream if c.choices and c.choices[0].delta.content])


async def test_a_change_applies_to_the_next_request_and_reset_restores_the_start_up_configuration(
    llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess
) -> None:
    startup = (await simulator.areset())["config"]
    assert startup == SimulatorConfig(**startup).engine_settings()  # every field but the faults, nothing else
    assert await _content_tokens(llm_client) == startup["output_tokens"]

    shown = await simulator.aconfigure(output_tokens=3, tpot_ms=1, ttft_ms=1)
    assert (shown["output_tokens"], shown["tpot_ms"], shown["max_num_seqs"]) == (3, 1.0, startup["max_num_seqs"])
    assert await simulator.aconfig() == shown
    assert await _content_tokens(llm_client) == 3

    await simulator.areset()
    assert await simulator.aconfig() == startup
    assert await _content_tokens(llm_client) == startup["output_tokens"]


async def test_a_request_already_started_keeps_the_configuration_it_started_with(
    llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess
) -> None:
    await simulator.aconfigure(output_tokens=20, tpot_ms=20)
    stream = await llm_client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    tokens = 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            tokens += 1
            if tokens == 1:  # streaming: the change comes in the middle of it
                await simulator.aconfigure(output_tokens=2, tpot_ms=1)
    assert tokens == 20
    assert await _content_tokens(llm_client) == 2


async def test_latency_set_at_run_time_is_the_latency_served(
    llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess
) -> None:
    await simulator.aconfigure(ttft_ms=400)
    started = time.monotonic()
    await llm_client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1)
    assert time.monotonic() - started >= 0.4


async def test_max_num_seqs_changes_how_many_decode_at_once(
    llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess
) -> None:
    await simulator.aconfigure(max_num_seqs=1, output_tokens=30, tpot_ms=20)
    streams = [asyncio.create_task(_content_tokens(llm_client)) for _ in range(3)]

    async def counts() -> tuple[int, int]:
        stats = await simulator.astats()
        return stats["running"], stats["waiting"]

    await until_async(counts, lambda both: both == (1, 2))
    await simulator.aconfigure(max_num_seqs=3)  # the waiting ones are admitted at once, as on a larger server
    assert await counts() == (3, 0)
    assert await asyncio.gather(*streams) == [30, 30, 30]


async def test_a_bad_value_is_refused_naming_its_field_and_changes_nothing(simulator: SimulatorProcess) -> None:
    before = await simulator.aconfig()
    for bad, field in (
        ({"tpot_ms": -1}, "tpot_ms"),
        ({"output_tokens": 4, "max_num_seqs": 0}, "max_num_seqs"),
        ({"embedding_dim": "wide"}, "embedding_dim"),
        ({"rate_429": 1}, "rate_429"),
        ({"nonsense": 1}, "nonsense"),
    ):
        with pytest.raises(RuntimeError, match=rf"-> 400: .*{field}"):
            await simulator.aconfigure(**bad)
    assert await simulator.aconfig() == before
    assert before == {**SimulatorConfig().engine_settings(), **FAST_FLAGS}  # the view's flags over the defaults
