"""Fault injection as the real SDK sees it, driven deterministically through fail_next."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from devtools.simulator.testing import SimulatorProcess
from tests.devtools.simulator.fixtures import FAST_FLAGS, SimulatorFactory, make_client
from tests.waiting import until_async

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


async def _chat_stream(client: openai.AsyncOpenAI, **kwargs: Any) -> list[str]:
    stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True, **kwargs)
    return [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]


async def _wait_idle(sim: SimulatorProcess, within: float = 1.0) -> None:
    await until_async(sim.astats, lambda stats: stats["running"] == stats["waiting"] == 0, within=within)


async def test_429_carries_retry_after(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    await simulator.afaults(fail_next=["429"], retry_after=7)
    with pytest.raises(openai.RateLimitError) as caught:
        await llm_client.chat.completions.create(model="m", messages=MESSAGES)
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.status_code == 429
    assert len(await _chat_stream(llm_client)) == 12  # the queue is consumed: next request is fine


async def test_500_on_stream_and_responses(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    await simulator.afaults(fail_next=["500", "503"])
    with pytest.raises(openai.InternalServerError) as first:
        await _chat_stream(llm_client)
    with pytest.raises(openai.InternalServerError) as second:
        await llm_client.responses.create(model="m", input="hi", stream=True)
    assert (first.value.status_code, second.value.status_code) == (500, 503)


async def test_hang_times_out_and_frees_the_slot(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    await simulator.afaults(fail_next=["hang", "hang"])
    stream = await llm_client.chat.completions.create(model="m", messages=MESSAGES, stream=True, timeout=0.4)
    with pytest.raises(openai.APITimeoutError):
        [chunk async for chunk in stream]
    with pytest.raises(openai.APITimeoutError):
        await llm_client.responses.create(model="m", input="hi", timeout=0.4)
    await _wait_idle(simulator)
    stats = await simulator.astats()
    assert stats["aborted"] == 2 and stats["completed"] == 0


async def test_stall_pauses_then_resumes(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    await simulator.afaults(fail_next=["stall:3:1", "stall:2:5"])
    stream = await llm_client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    arrivals = [time.perf_counter() async for c in stream if c.choices and c.choices[0].delta.content]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(arrivals) == 12
    assert gaps[2] >= 0.95 and max(gaps[:2] + gaps[3:]) < 0.5
    with pytest.raises(openai.APITimeoutError):
        await _chat_stream(llm_client, timeout=0.4)
    await _wait_idle(simulator)


async def test_drop_breaks_the_stream(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    await simulator.afaults(fail_next=["drop:3", "drop:4", "drop"])
    received: list[str] = []
    stream = await llm_client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert len(received) == 3
    events: list[str] = []
    response_stream = await llm_client.responses.create(model="m", input="hi", stream=True)
    with pytest.raises(openai.APIConnectionError):
        async for event in response_stream:
            events.append(event.type)
    assert events.count("response.output_text.delta") == 4 and "response.completed" not in events
    with pytest.raises(openai.APIConnectionError):
        await llm_client.chat.completions.create(model="m", messages=MESSAGES)
    stats = await simulator.astats()
    assert stats["dropped"] == 3 and stats["running"] == 0


async def test_stats_count_every_attempt(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    await simulator.afaults(fail_next=["429", "500", "ok", "500"])
    outcomes = []
    for _ in range(3):
        try:
            await llm_client.chat.completions.create(model="m", messages=MESSAGES)
            outcomes.append("ok")
        except openai.APIStatusError as exc:
            outcomes.append(str(exc.status_code))
    with pytest.raises(openai.InternalServerError):
        await llm_client.responses.create(model="m", input="hi")
    await llm_client.embeddings.create(model="e", input="not a fault target", encoding_format="float")
    stats = await simulator.astats()
    assert outcomes == ["429", "500", "ok"]
    assert stats["endpoints"]["chat"] == {
        "attempts": 3,
        "completed": 1,
        "aborted": 0,
        "dropped": 0,
        "prompt_tokens": stats["endpoints"]["chat"]["prompt_tokens"],
        "completion_tokens": 12,
        "status": {"200": 1, "429": 1, "500": 1},
    }
    assert stats["endpoints"]["responses"]["status"] == {"500": 1}
    assert stats["attempts"] == 5 and stats["status"] == {"200": 2, "429": 1, "500": 2}
    assert await simulator.ametric("llm_sim_rate_limited_total") == 1
    assert await simulator.ametric("llm_sim_server_errors_total") == 2
    assert await simulator.ametric("llm_sim_requests_total") == 5
    assert [r["endpoint"] for r in await simulator.arequests()][-2:] == ["responses", "embeddings"]


async def test_seeded_rates_repeat_after_reset(llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess) -> None:
    async def pattern() -> list[int]:
        await simulator.afaults(rate_500=0.5)
        codes = []
        for _ in range(12):
            try:
                await llm_client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1)
                codes.append(200)
            except openai.InternalServerError:
                codes.append(500)
        await simulator.areset()  # reseeds the rates' RNG, and restores the start-up configuration
        await simulator.aconfigure(**FAST_FLAGS)
        return codes

    first = await pattern()
    assert first == await pattern() and 200 in first and 500 in first


async def test_admin_rejects_bad_faults(simulator: SimulatorProcess) -> None:
    for bad in ({"rate_429": 1.5}, {"nonsense": 1}, {"fail_next": ["teapot"]}, {"endpoints": ["x"]}):
        with pytest.raises(RuntimeError, match="400"):
            await simulator.afaults(**bad)
    assert (await simulator.afaults())["rate_429"] == 0.0


async def test_fault_flags_at_startup(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(rate_429=1, retry_after=3, tpot_ms=1, output_tokens=4)
    async with make_client(sim.base_url) as client:
        for _ in range(2):
            with pytest.raises(openai.RateLimitError) as caught:
                await client.chat.completions.create(model="m", messages=MESSAGES)
            assert caught.value.response.headers["retry-after"] == "3"
            await sim.areset()  # back to the start-up faults, not to none
        await client.embeddings.create(
            model="e", input="embeddings are not a default fault target", encoding_format="float"
        )
        await sim.afaults(rate_429=0)
        await client.chat.completions.create(model="m", messages=MESSAGES)
    stats = await sim.astats()
    assert stats["status"] == {"200": 2}


async def test_refuse_acts_as_a_less_capable_server(
    llm_client: openai.AsyncOpenAI, simulator: SimulatorProcess
) -> None:
    await simulator.afaults(refuse=["json_schema", "stream_options", "responses"])
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    with pytest.raises(openai.InternalServerError, match="Input should be 'text' or 'json_object'"):
        await llm_client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
        )
    # json_object with a schema beside it, as llama.cpp's server takes it: constrained to that schema
    reply = await llm_client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        extra_body={"response_format": {"type": "json_object", "schema": schema}},
    )
    assert set(json.loads(reply.choices[0].message.content or "")) == {"a"}
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        await _chat_stream(llm_client, stream_options={"include_usage": True})
    with pytest.raises(openai.NotFoundError):
        await llm_client.responses.create(model="m", input="hello")
    with pytest.raises(RuntimeError, match="unknown capability 'telepathy'"):
        await simulator.afaults(refuse=["telepathy"])
