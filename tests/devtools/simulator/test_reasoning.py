"""--reasoning-tokens: reasoning streams before the answer, in vLLM's chat field and the Responses events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from devtools.simulator.testing import SimulatorProcess
from tests.devtools.simulator.fixtures import FAST_FLAGS, make_client
from tests.llm_simulator import simulator_view


@pytest.fixture
def reasoning_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, {**FAST_FLAGS, "reasoning_tokens": 5})


@pytest.fixture
async def client(reasoning_simulator: SimulatorProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    async with make_client(reasoning_simulator.base_url) as client:
        yield client


async def test_chat_streams_reasoning_content_first(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "why is the sky blue"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    kinds: list[str] = []
    reasoning = content = ""
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
        if not chunk.choices:
            continue
        extra = chunk.choices[0].delta.model_extra or {}
        if extra.get("reasoning_content"):
            kinds.append("reasoning")
            reasoning += extra["reasoning_content"]
        if chunk.choices[0].delta.content:
            kinds.append("content")
            content += chunk.choices[0].delta.content
    assert kinds == ["reasoning"] * 5 + ["content"] * 12
    assert reasoning.startswith("Thinking: why is the sky")
    assert content.startswith("Summary: why is the sky blue")
    assert usage is not None and usage.completion_tokens == 17
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 5


async def test_chat_enable_thinking_false_and_non_streaming(client: openai.AsyncOpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    thinking = await client.chat.completions.create(model="m", messages=messages)
    direct = await client.chat.completions.create(
        model="m", messages=messages, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    assert (thinking.choices[0].message.model_extra or {})["reasoning_content"].startswith("Thinking:")
    assert thinking.usage is not None and thinking.usage.completion_tokens == 17
    assert direct.usage is not None and direct.usage.completion_tokens == 12


async def test_responses_stream_reasoning_text_then_answer(client: openai.AsyncOpenAI) -> None:
    stream = await client.responses.create(model="m", input="why is the sky blue", stream=True)
    events = [event async for event in stream]
    types = [e.type for e in events]
    first_text = types.index("response.output_text.delta")
    assert types.count("response.reasoning_text.delta") == 5
    assert types.index("response.reasoning_text.done") < first_text
    completed = events[-1]
    assert completed.type == "response.completed"
    reasoning_item, message = completed.response.output
    assert reasoning_item.type == "reasoning" and reasoning_item.content is not None
    assert reasoning_item.content[0].text.startswith("Thinking:")
    assert message.type == "message"
    usage = completed.response.usage
    assert usage is not None and usage.output_tokens == 17
    assert usage.output_tokens_details.reasoning_tokens == 5


async def test_responses_reasoning_summary_events_when_asked(client: openai.AsyncOpenAI) -> None:
    async with client.responses.stream(model="m", input="hi", reasoning={"summary": "auto"}) as stream:
        types = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert types.count("response.reasoning_summary_text.delta") == 5
    assert "response.reasoning_text.delta" not in types
    assert final.output[0].type == "reasoning"
    assert final.output[0].summary[0].text.startswith("Thinking:")
    assert final.output_text.startswith("Summary: hi")
