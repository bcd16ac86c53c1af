"""Streamed answers over real loopback HTTP with the real SDK: deltas on the right channel, usage once, the
request on the wire as the API expects it."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from devtools.simulator.testing import SimulatorProcess
from rag.llm import LLMBackend, LLMDelta
from rag.state import Usage
from tests.rag.llm.conftest import USER, BackendFactory


async def collect(backend_obj: LLMBackend, **kwargs: Any) -> list[LLMDelta]:
    async with contextlib.aclosing(backend_obj.stream_answer(**kwargs)) as deltas:
        return [delta async for delta in deltas]


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_stream_yields_reasoning_then_answer_then_one_usage(
    api: str, make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    deltas = await collect(make_backend(), backend=api, node="response_synth", messages=USER)

    kinds = [d.kind for d in deltas]
    assert kinds.count("usage") == 1 and kinds[-1] == "usage"
    # The simulator thinks (4 reasoning tokens) before it answers (12 tokens), one token per delta.
    assert kinds[:-1] == ["reasoning"] * 4 + ["answer"] * 12
    reasoning = "".join(d.text for d in deltas if d.kind == "reasoning")
    answer = "".join(d.text for d in deltas if d.kind == "answer")
    assert reasoning.startswith("Thinking:")
    assert answer.startswith("Summary: How do I reset my password")
    usage = deltas[-1].usage
    assert isinstance(usage, Usage)
    assert usage.output_tokens == 16 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    stats = await sim.astats()
    assert stats["endpoints"][api]["attempts"] == 1 and stats["endpoints"][api]["completed"] == 1


async def test_chat_request_asks_for_usage_and_uses_node_overrides(
    make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    backend = make_backend(node_models={"planner": "small-model"}, node_temperatures={"planner": 0.1})
    await collect(backend, backend="chat", node="planner", instructions="Be brief.", input="hello")
    await collect(backend, backend="chat", node="response_synth", messages=USER, temperature=0.7, max_tokens=50)

    planner, synth = (r["body"] for r in await sim.arequests())
    assert planner["stream"] is True and planner["stream_options"] == {"include_usage": True}
    assert planner["model"] == "small-model" and planner["temperature"] == 0.1
    assert planner["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    assert synth["model"] == "sim-chat" and synth["temperature"] == 0.7 and synth["max_tokens"] == 50


async def test_responses_request_folds_system_messages_into_instructions(
    make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    messages = [{"role": "system", "content": "Answer from the sources."}, *USER]
    await collect(make_backend(responses_model="sim-resp"), backend="responses", node="n", messages=messages)

    (request,) = await sim.arequests()
    body = request["body"]
    assert body["model"] == "sim-resp" and body["stream"] is True
    assert body["instructions"] == "Answer from the sources."
    assert body["input"] == USER


async def test_chat_reasoning_can_be_switched_off_through_extra_body(make_backend: BackendFactory) -> None:
    deltas = await collect(
        make_backend(),
        backend="chat",
        node="n",
        messages=USER,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert {d.kind for d in deltas} == {"answer", "usage"}


async def test_stream_text_helper_joins_channels(make_backend: BackendFactory) -> None:
    answer, reasoning, usage = await make_backend().stream_text(backend="responses", node="n", messages=USER)
    assert answer.startswith("Summary:") and reasoning.startswith("Thinking:")
    assert usage.output_tokens == 16


async def test_unknown_backend_is_a_programming_error(make_backend: BackendFactory) -> None:
    with pytest.raises(ValueError, match="unknown LLM backend"):
        await collect(make_backend(), backend="completions", node="n", messages=USER)
